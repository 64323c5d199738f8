"""NodeRuntime: the glue between one pure ``NodeState`` and the reactor.

It owns the clock (``set_time``), the end of every batch (``after_batch``:
the effects drained, the memory level, the node file, the output, the
exact wake-up for the earliest deadline: one ``IDelayedCall``, moved only
when a sooner deadline appears), the periodic tick (``tick``, run ``hz``
times a second by ``disque.node.timers``), the dispatch in force
(``-LOADING`` while the AOF loads, ``-MISCONF`` while it fails, else the
plain one: swapped, so the normal path checks nothing), bound as the one
front door every request goes through (``run_command``), CLIENT PAUSE,
shutdown, and the auth gate's hooks.  It is what a client protocol (RESP,
HTTP) may ask of the node (:class:`disque.interfaces.INodeRuntime`).

Composed of: :class:`~disque.node.effects.Effects` (executing the core's
effects, batching output), :class:`~disque.node.bushub.BusHub` (what the
bus asks), :class:`~disque.node.facts.ProcessFacts` (INFO's process
facts) and :class:`~disque.node.nodefile.NodeFile`.
"""

import math
import time
import platform
from functools import partial

from zope.interface import implementer

from ..access.failed_auth import BLOCK_AFTER, BLOCK_SECONDS, FailedAuth, Throttle, client_source
from ..commands import load as load_commands
from ..commands.context import Context
from ..core.membership import new_node_id
from ..core.node import NodeState
from ..interfaces import IClientRuntime
from ..commands.dispatcher import dispatch_loading, dispatch_misconf, run_of_commands
from ..config.specs import parse_seed
from ..io.logs import logger
from ..contract import ReplySlot
from ..resp.reply import one_line
from .bushub import BusHub
from .census import Census
from .client_memory import ClientMemory, effective_limit
from .effects import Effects
from .facts import ProcessFacts
from .listeners import own_hosts
from .nodefile import NodeFile

log = logger("disque")


def _closure(dispatch, ctx):
    def run_command(client, argv):
        return dispatch(ctx, client, argv)
    return run_command


# ``dispatch`` bound to the context: on CPython a functools.partial (C, no
# frame of its own); on PyPy a closure, which the JIT inlines, where
# PyPy's partial (written in Python, with *args and **kwargs) cost about 6%
# of a pipelined request (benchmarks/dispatch_bench.py, docs/benchmarks.md).
_bound = partial if platform.python_implementation() == "CPython" else _closure


@implementer(IClientRuntime)
class NodeRuntime:
    """Glue between one NodeState and the reactor (also the INodeRuntime)."""

    def __init__(self, config, reactor, persistence, on_shutdown, node_id=None, nodes_path=None):
        self.config = config
        self.reactor = reactor
        self.persistence = persistence
        self.on_shutdown = on_shutdown
        self.links = None  # disque.bus.links.Links once the bus runs
        self.misconf = None  # the -MISCONF reply while the AOF is in error
        self.nodefile = NodeFile(nodes_path, config, reactor.seconds)
        now = int(reactor.seconds() * 1000)
        self.node = NodeState(node_id or new_node_id(), now, port=config["port"])
        self.bus = BusHub(self)
        self.effects = Effects(self)
        self._follow_config()
        self._dispatch = load_commands()
        persistence.on_error = self._persistence_error
        self.loading = False  # the AOF loads in the background (start_loading)
        self.ctx = Context(self.node, config, self)
        self.run_of_commands = run_of_commands(self.ctx)
        self.census = Census(self)  # the cluster view's counts, asked and answered over the bus
        self._choose_dispatch()  # run_command: the one front door
        # maxmemory-clients: while it is set (counting_clients), client
        # connections report what they hold to client_memory.
        self.client_memory = ClientMemory(self.ctx.clients, self.ctx.stats, reactor.seconds)
        self.counting_clients = False
        config.on_change("maxmemory-clients", self._set_client_memory_limit)
        config.on_change("maxmemory", self._set_client_memory_limit)  # a share of it
        self.facts = ProcessFacts(reactor)
        self.paused_until = 0
        self._unpause_waiters = []
        self._wake = None
        self._wake_at = None
        self.shutting_down = False
        self.failed_auth = FailedAuth(reactor.seconds, log)
        self.auth_throttle = Throttle(reactor.seconds)

    def _follow_config(self):
        """The directives the core keeps a copy of, applied now and at each
        CONFIG SET (the one way a change takes effect: see disque.config)."""
        node, config, effects = self.node, self.config, self.effects
        config.on_change("cluster-node-timeout", lambda ms: setattr(node.cluster, "node_timeout", ms))
        config.on_change("dedup-window", lambda seconds: setattr(node.jobs.dedup, "window", seconds * 1000))
        config.on_change("max-deliveries", lambda n: setattr(node.addjob, "max_deliveries", n))
        config.on_change("output-flush", lambda mode: setattr(effects, "flush_per_turn", mode == "turn"))
        # Client limits read at each request batch (disque.resp.protocol).
        config.on_change("client-output-buffer-limit", lambda limits: setattr(self, "output_limits",
                                                                               limits["normal"]))
        config.on_change("client-query-buffer-limit", lambda n: setattr(self, "query_buffer_limit", n))
        config.on_change("proto-max-bulk-len", self._set_max_bulk_len)
        config.on_change("cluster-link-sendbuf-limit", lambda n: setattr(self.bus, "bus_sendbuf_limit", n))
        node.cluster.own_hosts = own_hosts(config["bind"])
        config.on_change("cluster-seeds", self._set_seeds)

    def _set_seeds(self, words):
        """``cluster-seeds``, at start-up and at each CONFIG SET: the core
        tries them from now (disque.core.seeds)."""
        seeds = []
        for word in words:
            host, port = parse_seed(word)
            if (host.encode(), port) not in seeds:
                seeds.append((host.encode(), port))
        self.node.cluster.seeds.configure(seeds, int(self.reactor.seconds() * 1000))
    def _set_client_memory_limit(self, _value):
        """``maxmemory-clients``, in bytes or a share of ``maxmemory``."""
        config = self.config
        limit = effective_limit(config["maxmemory-clients"], config["maxmemory"])
        self.client_memory.set_limit(limit)
        self.counting_clients = bool(limit)

    def _set_max_bulk_len(self, n):
        """``proto-max-bulk-len``: for new clients, and at once for the
        connected ones (as the original checks it at each bulk header)."""
        self.max_bulk_len = n
        ctx = getattr(self, "ctx", None)  # none yet at start-up
        for client in ctx.clients.values() if ctx is not None else ():
            parser = getattr(client.conn, "parser", None)
            if parser is not None:
                parser.set_max_bulk_len(n)

    # -- time, batches and deadlines -------------------------------------------

    def set_time(self):
        """A batch of work begins: the core's clock from the reactor's;
        returns it (ms)."""
        now = self.node.now = int(self.reactor.seconds() * 1000)
        return now

    def now_ms(self):
        """The time of the batch in progress (ms), as :meth:`set_time` set it."""
        return self.node.now

    def after_batch(self):
        """A batch of work is done (a read, a timer, a bus frame): run what
        it caused, save the node file if the cluster changed, let the output
        leave (Effects.end_batch) and wake up for the earliest deadline."""
        node = self.node
        if node.outbox:
            self.effects.drain()
        node.memory.update_level(self.config["maxmemory"])
        if node.cluster.dirty and self.nodefile.due():
            self.nodefile.save(node.cluster)
        self.effects.end_batch()
        if not self.loading and (self._wake is None or node.deadline_may_be_sooner()):
            self._reschedule()  # (while loading nothing is due: the load's end schedules the jobs)

    def _reschedule(self):
        at = self.node.next_deadline()
        if at is None:
            return
        if self._wake is not None and self._wake.active():
            if self._wake_at <= at:
                return
            self._wake.cancel()
        delay = max(at - int(self.reactor.seconds() * 1000), 0) / 1000.0
        self._wake_at = at
        self._wake = self.reactor.callLater(delay, self.wake)

    def wake(self):
        """The core's earliest deadline came: run what is due, nothing
        periodic (that is :meth:`tick`'s, ``hz`` times a second)."""
        self._wake = None
        self.set_time()
        self.node.run_due()
        self.after_batch()

    def tick(self):
        """The periodic work, ``hz`` times a second (the ``hz`` timer of
        disque.node.timers)."""
        self.set_time()
        if self.config["maxmemory-policy"] == "acks":
            self.node.memory.set_limit(self.config["maxmemory"])  # evicts above 95%
        else:  # noeviction: past the limit new jobs are refused, nothing is evicted
            self.node.memory.update_level(self.config["maxmemory"])
        self.node.tick()
        self.ctx.stats.sample(self.node.now)
        self.facts.sample_rss()
        if self.node.persist:
            self.persistence.maybe_auto_rewrite(self.node)
        self.after_batch()

    def save_nodes(self):
        """Save the node file now (CLUSTER SAVECONFIG); an error text or None."""
        return self.nodefile.save(self.node.cluster)

    # -- the front door and the dispatch in force -----------------------------------

    def _persistence_error(self, error):
        """The AOF entered (an OSError) or left (None) its error state:
        commands that change state, and PING, get -MISCONF meanwhile."""
        if error is None:
            self.misconf = None
        else:
            text = self.persistence.error_text() or "unknown error"
            self.misconf = b"-MISCONF Errors writing to the AOF file: " + one_line(text.encode()) + b"\r\n"
        self._choose_dispatch()

    def _choose_dispatch(self):
        """The front door for the node's state, ``run_command(client,
        argv)``: the one way in for every request path (the RESP protocol,
        the HTTP side's actions, the in-memory test clients through RESP).
        It is the dispatch in force (:mod:`disque.commands.dispatcher`:
        ``-LOADING`` while the AOF loads, ``-MISCONF`` while it is in
        error, else the plain one) bound to the command context: swapped,
        so the normal path checks nothing more, and bound once, so the
        door costs no call of its own.  The dispatch applies the checks
        (arity, authentication, ACL, OOM), feeds MONITOR, the slow log, the
        latency monitor and the command statistics, and serves the clients
        blocked on queues that got jobs; it returns the handler's answer
        (:mod:`disque.contract`: bytes, ``BLOCKED`` or a
        ``ReplySlot``)."""
        if self.loading:
            self.dispatch = dispatch_loading
        elif self.misconf is not None:
            self.dispatch = dispatch_misconf
        else:
            self.dispatch = self._dispatch
        self.run_command = _bound(self.dispatch, self.ctx)

    def start_loading(self):
        """Until :meth:`finish_loading`: clients get ``-LOADING`` but for
        the few commands the original runs while loading, and peers' bus
        connections are closed.  Nothing is due meanwhile: loaded jobs are
        scheduled by the end of the load (``Jobs.finish_load``), and the
        tick starts after it (disque.node.loading)."""
        self.loading = True
        self._choose_dispatch()

    def finish_loading(self):
        self.loading = False
        self._choose_dispatch()

    # -- the auth gate (disque.access.failed_auth), by source address: AUTH
    # through auth_gate / auth_failed / auth_succeeded, the HTTP side's
    # passwords through the client_auth_* hooks directly.

    def auth_refusal(self, source):
        """None if ``source`` may try a password, else the error reply
        refusing it (counted): it failed too often lately."""
        seconds = self.auth_throttle.refused_for(source)
        if not seconds:
            return None
        self.ctx.stats.auth_refused += 1
        return b"-ERR too many failed authentication attempts from %s: retry in %d seconds\r\n" % (
            one_line(source.encode(errors="replace")), math.ceil(seconds))

    def client_auth_failed(self, source):
        """A wrong password from ``source``: counted, logged (once a minute
        per source); return how many seconds its answer must wait (0.0:
        none)."""
        stats = self.ctx.stats
        stats.auth_failures += 1
        self.failed_auth.record("client", source, "invalid password")
        delay, blocked = self.auth_throttle.failed(source)
        if delay:
            stats.auth_delayed += 1
        if blocked:
            log.warn("Refusing authentication from {source} for {seconds:.0f} seconds: {n} failures within "
                     "a minute", source=source, seconds=BLOCK_SECONDS, n=BLOCK_AFTER)
        return delay

    def client_auth_succeeded(self, source):
        self.auth_throttle.succeeded(source)

    def auth_gate(self, client):
        """None, or the reply refusing ``client``'s AUTH without looking at
        the password."""
        return self.auth_refusal(client_source(client))

    def auth_failed(self, client, reply):
        """A wrong AUTH: counted and logged; returns ``reply``, or a
        ReplySlot that delivers it later (the client's source failed too
        often in a row: the requests behind it run, their replies wait)."""
        delay = self.client_auth_failed(client_source(client))
        if not delay:
            return reply
        slot = ReplySlot(client.conn)
        self.reactor.callLater(delay, self._late_reply, slot, reply)
        return slot

    def _late_reply(self, slot, reply):
        self.set_time()
        slot.deliver(reply)
        self.after_batch()

    def auth_succeeded(self, client):
        """A right AUTH: its source starts afresh."""
        self.client_auth_succeeded(client_source(client))

    # -- CLIENT PAUSE ------------------------------------------------------------

    def clients_paused(self):
        return self.node.now < self.paused_until

    def wait_unpause(self, proto):
        if proto not in self._unpause_waiters:
            self._unpause_waiters.append(proto)

    def pause_clients(self, ms):
        self.paused_until = max(self.paused_until, self.node.now + ms)
        self.reactor.callLater(ms / 1000.0, self._unpause)

    def _unpause(self):
        self.set_time()
        if self.clients_paused():
            return
        self.paused_until = 0
        waiters, self._unpause_waiters = self._unpause_waiters, []
        for proto in waiters:
            proto.resume()
        self.after_batch()

    # -- what INFO, SHUTDOWN, BGREWRITEAOF, DEBUG ask ------------------------------

    def now_us(self):
        return int(self.reactor.seconds() * 1_000_000)

    def process_info(self):
        return self.facts.process_info()

    def memory(self):
        """(used, rss, peak): ``used`` is the node's estimate of its data
        (what maxmemory is compared with), peak is of RSS."""
        rss = self.facts.sample_rss()
        return self.node.memory.used(), rss, self.facts.peak_memory

    def clients_memory(self):
        memory = self.client_memory
        return memory.limit, memory.total

    def cpu_times(self):
        return self.facts.cpu_times()

    def struct_sizes(self):
        return self.facts.struct_sizes()

    def persistence_info(self):
        return list(self.persistence.info()) + self.nodefile.info()  # the node file's: only while it fails

    def shutdown(self, mode):
        if self.shutting_down:
            return None
        self.shutting_down = True
        log.info("User requested shutdown ({mode})...", mode=mode or "default")
        if mode == "rewrite-aof" and self.loading:
            # As Redis never saves while loading: half the state would
            # replace the file.  The file stays as it is.
            log.warn("Still loading the AOF: shutting down without rewriting it")
        elif mode == "rewrite-aof":
            # No client is served from here on: the file can hold the queues.
            try:
                self.persistence.rewrite_now(self.node, self.config["aof-enqueue-jobs-once"])
            except OSError as e:
                self.shutting_down = False
                return "Errors trying to SHUTDOWN. Check logs. (%s)" % (e.strerror or e)
        self.persistence.close()
        self.reactor.callLater(0, self.on_shutdown)
        return None

    def bgrewriteaof(self):
        return self.persistence.rewrite(self.node)

    def sleep(self, seconds):
        time.sleep(seconds)

    def flushed(self):
        # The log forgets the jobs too, or a restart would bring them back:
        # rewritten from the now empty node (instant), abandoning a rewrite
        # in progress.
        if self.node.persist:
            try:
                self.persistence.rewrite_now(self.node, False)
            except OSError as e:  # the file still holds the jobs: a restart would bring them back
                log.error("The AOF could not be rewritten after the flush ({error}): a restart would load "
                          "the flushed jobs again", error=e.strerror or e)
