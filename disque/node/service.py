"""DisqueNodeService: a Disque node as a Twisted ``MultiService``.

This is the only module that wires the pure core to the reactor: it owns the
clock, executes the core's effects, runs the periodic tick (``hz``, a
``TimerService``) plus an exact wake-up for the earliest deadline (one
``IDelayedCall``, moved only when a sooner deadline appears), and implements
:class:`INodeRuntime` for the command layer.  Its children are the listeners
(``StreamServerEndpointService``s from the endpoint strings of
``disque.node.listeners``) and the timers.  Embed a node in any Twisted
application::

    from disque.config import Config
    from disque.node.service import DisqueNodeService
    DisqueNodeService(Config.defaults()).setServiceParent(application)
"""

import math
import os
import platform
import re
import resource
import sys
import time

from twisted.application.internet import TimerService
from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.python.failure import Failure
from zope.interface import implementer

from .. import DISQUE_VERSION
from ..commands import dispatch_loading, dispatch_misconf, load as load_commands
from ..commands.context import Context
from ..bus import auth as bus_auth, wire
from ..bus.links import BUS_PORT_OFFSET, Links
from ..bus.protocol import BusServerFactory
from ..core.membership import new_node_id, parse_nodes_file
from ..core import messages
from ..core.effects import execute
from ..core.node import NodeState
from ..config import ConfigSetError
from .client_memory import ClientMemory, effective_limit
from ..access.failed_auth import BLOCK_AFTER, BLOCK_SECONDS, FailedAuth, Throttle, client_source
from .heap import heap_freezer
from .idle import IdleClients
from ..interfaces import IFederationPolicyFactory, IHTTPFrontendFactory, INodeRuntime, IPersistenceFactory, LoadError
from .listeners import (BusConnector, DeferredEndpoint, Listener, bus_descriptions, client_descriptions,
                        listening_port, open_bus_refusal, server_endpoint, tls_descriptions)
from .log_limit import LogLimit
from .logs import logger, node_log
from ..persistence import files
from ..persistence.files import atomic_write, remove_stale_temps
from ..plugins import make_strategy
from .tls import RELOADABLE, TLSContexts, TLSError, TLSServerEndpoint, enabled as tls_enabled
from ..resp.protocol import RespFactory
from ..resp.reply import ReplySlot, one_line
from .watchdog import Watchdog

log = logger("disque")

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _gcc_version() -> str:
    """INFO gcc_version: the GCC that built the Python interpreter running
    the node (this project compiles nothing itself), or 0.0.0 when it was
    not GCC, as the original reports without GCC."""
    m = re.search(r"GCC (\d+)\.(\d+)\.(\d+)", platform.python_compiler())
    return ".".join(m.groups()) if m else "0.0.0"


#: With ``output-flush turn``, output kept for this long (ms) in one reactor
#: turn leaves without waiting for the turn's end: a turn that serves many
#: pipelined clients must not hold back the replicas' and clients' work.
MAX_TURN_MS = 1

#: While the AOF loads in the background, records are applied for this long
#: (seconds) per reactor turn; clients, INFO and the HTTP side are served
#: between two slices.
LOAD_SLICE = 0.01


# The messages bus version 3 changed or added (the rest read the same in 2).
_V3_TYPES = frozenset((messages.ReplJob, messages.YourJobs, *wire.FIRST_VERSION))


@implementer(INodeRuntime)
class NodeRuntime:
    """Glue between one NodeState and the reactor (also the INodeRuntime)."""

    def __init__(self, config, reactor, persistence, on_shutdown, node_id=None, nodes_path=None):
        self.config = config
        self.reactor = reactor
        self.persistence = persistence
        self.on_shutdown = on_shutdown
        self.nodes_path = nodes_path  # the node file; None: not kept (in-memory tests)
        self.links = None  # disque.bus.links.Links once the bus runs
        self._frames = {}  # bus frames encoded in the current drain round, by message
        self._bus_batch = 0  # >0 while a bus read is being handed to the core
        self.pending_output = []  # connections with output kept until the batch ends (disque.node.output)
        # Connections whose output waits for the AOF (end_turn): they got
        # output in a turn whose records the AOF could not write.  Their
        # later output queues behind (order), and all of it leaves once
        # the records are durable.  Invariant: a connection with kept
        # output is in pending_output or in held_output, exactly once.
        self.held_output = []
        self.persisted = False  # this turn gave the persistence records
        self.misconf = None  # the -MISCONF reply while the AOF is in error
        self.files = files.OS  # the node file's door to the disk, read at construction (tests replace it)
        self.nodes_file_error = None  # why the last save of the node file failed
        self.nodes_file_retry = 0.0
        # output-flush turn: output leaves once per reactor turn instead of
        # once per read.  A delayed call of 0 s runs once the reactor has
        # handed every socket ready in this turn its data, so the replies
        # and bus frames of all of them leave together (one write per
        # connection per turn), as the original's event loop does.  On a
        # test's Clock it runs when the test advances time.
        self.flush_per_turn = False
        self._turn = None  # the pending end_turn_now call
        self._turn_started = 0  # node time of the turn's first batch (or last early flush)
        now = int(reactor.seconds() * 1000)
        self.node = NodeState(node_id or new_node_id(), now, port=config["port"])
        self._follow_config()
        self.dispatch = self._dispatch = load_commands()  # the RESP protocol runs commands through it
        persistence.on_error = self._persistence_error
        self.loading = False  # the AOF loads in the background (start_loading)
        self.ctx = Context(self.node, config, self)
        # maxmemory-clients: while it is set (counting_clients), client
        # connections report what they hold to client_memory.
        self.client_memory = ClientMemory(self.ctx.clients, self.ctx.stats, reactor.seconds)
        self.counting_clients = False
        config.on_change("maxmemory-clients", self._set_client_memory_limit)
        config.on_change("maxmemory", self._set_client_memory_limit)  # a share of it
        self.start_time = reactor.seconds()
        self.run_id = os.urandom(20).hex()
        self.peak_memory = 0
        self.paused_until = 0
        self._unpause_waiters = []
        self._wake = None
        self._wake_at = None
        self.shutting_down = False
        self.failed_auth = FailedAuth(reactor.seconds, log)
        self.notice_limit = LogLimit(reactor.seconds)  # the core's notices with a key: a line a minute per key
        self.auth_throttle = Throttle(reactor.seconds)
        self.bus_nonces = bus_auth.Nonces()

    def _follow_config(self):
        """The directives the core keeps a copy of, applied now and at each
        CONFIG SET (the one way a change takes effect: see disque.config)."""
        node, config = self.node, self.config
        config.on_change("cluster-node-timeout", lambda ms: setattr(node.cluster, "node_timeout", ms))
        config.on_change("dedup-window", lambda seconds: setattr(node.jobs.dedup, "window", seconds * 1000))
        config.on_change("max-deliveries", lambda n: setattr(node.addjob, "max_deliveries", n))
        config.on_change("output-flush", lambda mode: setattr(self, "flush_per_turn", mode == "turn"))
        # Client limits read at each request batch (disque.resp.protocol).
        config.on_change("client-output-buffer-limit", lambda limits: setattr(self, "output_limits",
                                                                               limits["normal"]))
        config.on_change("client-query-buffer-limit", lambda n: setattr(self, "query_buffer_limit", n))
        config.on_change("proto-max-bulk-len", self._set_max_bulk_len)
        config.on_change("cluster-link-sendbuf-limit", lambda n: setattr(self, "bus_sendbuf_limit", n))

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

    # -- time and effects --------------------------------------------------

    def set_time(self):
        self.node.now = int(self.reactor.seconds() * 1000)

    def drain(self):
        """Execute the core's effects, and those they cause, in order."""
        outbox = self.node.outbox  # shared with node.cluster: never rebound
        while outbox:
            effects = outbox[:]
            outbox.clear()
            self._frames = {}  # one encoding per message, however many receivers
            execute(effects, self)

    # The effect executor (disque.core.effects.execute).

    def on_reply(self, effect):
        effect.client.conn.deliver(effect.payload)

    def on_persist(self, effect):
        self.persistence.append(effect.record)
        self.persisted = True

    def on_send(self, effect):
        if self.links is not None:
            frame = self._frame(effect.message, effect.node_id)
            if frame is not None:
                self.links.send(effect.node_id, frame)

    def on_send_link(self, effect):
        effect.link.send_frame(self._frame(effect.message, getattr(effect.link, "node_id", None)))

    def on_link(self, effect):
        if self.links is not None:
            self.links.ensure(effect.node_id, effect.host, effect.port)

    def on_unlink(self, effect):
        if self.links is not None:
            self.links.drop(effect.node_id)

    def on_notice(self, effect):
        if effect.key is None:
            log.info("{text}", text=effect.text)
            return
        folded = self.notice_limit.admit(effect.key)
        if folded is not None:
            log.info("{text}{more}", text=effect.text,
                     more=" (%d more like it not logged in the last minute)" % folded if folded else "")

    def on_rekey(self, effect):
        if self.links is not None:
            self.links.rekey(effect.old, effect.new)

    def _frame(self, msg, node_id):
        """``msg`` encoded for peer ``node_id`` (once per version and
        drain round, however many receivers): job records in bus version 3
        to a peer that announced it reads it, everything else in version 2,
        which every node reads (bus/wire.py).  None for a message the peer
        cannot read (the core does not send them to such peers: a guard)."""
        version = wire.OLDEST_PEER
        if type(msg) in _V3_TYPES and node_id is not None:
            peer = self.node.cluster.nodes.get(node_id)
            if peer is not None and peer.extensions:
                version = wire.VERSION
            elif type(msg) in wire.FIRST_VERSION:
                log.warn("not sending {kind} to {node}: it runs an older bus version",
                         kind=type(msg).__name__, node=node_id[:8].decode("ascii", "replace"))
                return None
        key = (id(msg), version)
        frames = self._frames
        frame = frames.get(key)
        if frame is None:
            frame = frames[key] = wire.encode(self.node.cluster.header(), msg, version)
        return frame

    def after_batch(self):
        if self.node.outbox:
            self.drain()
        self.node.memory.update_level(self.config["maxmemory"])
        if self.node.cluster.dirty and (self.nodes_file_error is None or
                                        self.reactor.seconds() >= self.nodes_file_retry):
            self.save_nodes()
        if not self.flush_per_turn:
            self.end_turn()
        elif self._turn is None:
            self._turn_started = self.node.now
            self._turn = self.reactor.callLater(0, self.end_turn_now)
        elif self.node.now - self._turn_started >= MAX_TURN_MS:
            self._turn_started = self.node.now  # a long turn: what is ready leaves now
            self.end_turn()
        if not self.loading and (self._wake is None or self.node.deadline_may_be_sooner()):
            self._reschedule()  # (while loading nothing is due: the load's end schedules the jobs)

    def end_turn_now(self):
        """The reactor turn ends (the delayed call), or must end at once (a
        stopping service: the pending call is cancelled, what it would have
        sent leaves now)."""
        if self._turn is not None:
            if self._turn.active():
                self._turn.cancel()
            self._turn = None
        self.end_turn()

    def end_turn(self):
        """Write the AOF, then send what every connection kept (at the end
        of each batch, or with ``output-flush turn`` once per reactor turn
        and every ``MAX_TURN_MS`` within a long one).

        No reply or bus frame leaves before the records of its turn are as
        durable as ``appendfsync`` promises: when the AOF cannot take them
        (a full disk, a failed fsync), the turn's output is held, with all
        that follows on the same connections, until a later flush (every
        tick retries) gets them on disk.  Turns that gave the AOF nothing
        (the -MISCONF replies, reads) still answer."""
        durable = self.persistence.flush() is not False
        persisted, self.persisted = self.persisted, False
        if durable:
            if self.held_output:
                for conn in self.held_output:
                    conn.release()
                self.pending_output[:0] = self.held_output
                self.held_output = []
        elif persisted and self.pending_output:
            for conn in self.pending_output:
                conn.hold()
            self.held_output += self.pending_output
            self.pending_output = []
        if self.pending_output:  # after the AOF: no reply before what it acknowledges
            self.flush_output()
        if self.counting_clients:
            if self.held_output:  # (what a held connection gets meanwhile stays)
                self.client_memory.report_all(self.held_output)
            self.client_memory.check()

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
        """The dispatch for the node's state: ``-LOADING`` while the AOF
        loads, ``-MISCONF`` while it is in error, else the plain one (the
        dispatch is swapped, so the normal path checks nothing)."""
        if self.loading:
            self.dispatch = dispatch_loading
        elif self.misconf is not None:
            self.dispatch = dispatch_misconf
        else:
            self.dispatch = self._dispatch

    def flush_output(self):
        """Send what every connection wrote in this batch (disque.node.output)."""
        pending = self.pending_output
        self.pending_output = []
        for conn in pending:
            conn.flush()
        if self.counting_clients:  # their output left, or waits for their transport
            self.client_memory.report_all(pending)

    # -- the cluster bus ---------------------------------------------------

    def bus_batch_begin(self):
        self._bus_batch += 1
        self.set_time()

    def bus_batch_end(self):
        self._bus_batch -= 1
        if not self._bus_batch:
            self.after_batch()

    def bus_message(self, header, msg, link):
        if not self._bus_batch:
            self.set_time()
        self.node.bus_receive(header, msg, link)
        if not self._bus_batch:
            self.after_batch()

    def bus_member(self, node_id):
        """Whether ``node_id`` is a member of the cluster (the bus protocol
        then takes its connection as that member's)."""
        return self.node.cluster.is_member(node_id)

    def bus_inbound(self, protocol):
        """A connection to our bus port carries the frames of a member."""
        if self.links is not None:
            self.links.inbound_from(protocol, protocol.sender)

    def bus_inbound_lost(self, protocol):
        if self.links is not None:
            self.links.inbound_lost(protocol)

    def bus_handshake(self, initiator):
        """The ``cluster-password`` handshake for a new bus connection
        (:mod:`disque.bus.auth`), or None when no password is set.  Read
        at each connection: CONFIG SET applies to the next ones."""
        password = self.config["cluster-password"]
        if not password:
            return None
        return bus_auth.Handshake(password.encode(), initiator, self.bus_nonces)

    def bus_auth_failed(self, source, reason):
        self.ctx.stats.bus_auth_failures += 1
        self.failed_auth.record("bus", source, reason)

    # Failed client authentications (disque.access.failed_auth), by source address:
    # AUTH through the hooks below, the HTTP side's passwords directly.

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

    # AUTH's hooks (disque.commands.server.auth): whether a source may try
    # at all, and what a failure or a success does.

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

    def bus_link_up(self, node_id):
        self.set_time()
        self.node.link_up(node_id)
        self.after_batch()

    def bus_link_lost(self, protocol):
        if self.links is not None and self.links.lost(protocol):
            self.set_time()
            self.node.link_down(protocol.node_id)
            self.after_batch()

    def save_nodes(self):
        """Write the node file crash-safely (:func:`atomic_write`: temp file,
        fsync, rename, directory fsync); return an error text or None.
        The cluster stays dirty until the file is written: a failed save is
        retried at the next batch (at most once a tick), logged once until
        it works again, and shown by INFO (``nodes_file_status``)."""
        cluster = self.node.cluster
        if self.nodes_path is None:
            cluster.dirty = False
            return None
        now = self.reactor.seconds()
        try:
            atomic_write(self.files, self.nodes_path, cluster.nodes_file_text())
        except OSError as e:
            self.nodes_file_retry = now + 1.0 / max(self.config["hz"], 1)
            text = e.strerror or str(e)
            if self.nodes_file_error is None:
                log.error("Could not save the node file {path}: {error} (retried every tick)",
                          path=self.nodes_path, error=text)
            self.nodes_file_error = text
            return text
        cluster.dirty = False
        if self.nodes_file_error is not None:
            log.warn("The node file {path} is saved again", path=self.nodes_path)
            self.nodes_file_error = None
        return None

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
        """The periodic work, ``hz`` times a second (the cron
        TimerService)."""
        self.set_time()
        if self.config["maxmemory-policy"] == "acks":
            self.node.memory.set_limit(self.config["maxmemory"])  # evicts above 95%
        else:  # noeviction: past the limit new jobs are refused, nothing is evicted
            self.node.memory.update_level(self.config["maxmemory"])
        self.node.tick()
        self.ctx.stats.sample(self.node.now)
        rss = _rss()
        if rss > self.peak_memory:
            self.peak_memory = rss
        if self.node.persist:
            self.persistence.maybe_auto_rewrite(self.node)
        self.after_batch()

    # -- loading the AOF in the background --------------------------------

    def start_loading(self):
        """Until :meth:`finish_loading`: clients get ``-LOADING`` but for
        the few commands the original runs while loading, and peers' bus
        connections are closed.  Nothing is due meanwhile: loaded jobs are
        scheduled by the end of the load (``Jobs.finish_load``), and the
        tick starts after it (DisqueNodeService)."""
        self.loading = True
        self._choose_dispatch()

    def finish_loading(self):
        self.loading = False
        self._choose_dispatch()

    # -- CLIENT PAUSE ------------------------------------------------------

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

    # -- INodeRuntime -----------------------------------------------------------

    def now_us(self):
        return int(self.reactor.seconds() * 1_000_000)

    def process_info(self):
        uname = platform.uname()
        return {
            "build_id": self.run_id[:16],
            "os": "%s %s %s" % (uname.system, uname.release, uname.machine),
            "arch_bits": 64 if sys.maxsize > 2**32 else 32,
            "multiplexing_api": getattr(self.reactor, "multiplexing_api", None)
            or type(self.reactor).__name__.replace("Reactor", "").lower() or "twisted",
            "gcc_version": _gcc_version(),
            "runtime": "%s %s" % (platform.python_implementation(), platform.python_version()),
            "process_id": os.getpid(),
            "run_id": self.run_id,
            "uptime": int(self.reactor.seconds() - self.start_time),
            "executable": os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else sys.executable,
        }

    def memory(self):
        """(used, rss, peak): ``used`` is the node's estimate of its data
        (what maxmemory is compared with), peak is of RSS."""
        rss = _rss()
        self.peak_memory = max(self.peak_memory, rss)
        return self.node.memory.used(), rss, self.peak_memory

    def clients_memory(self):
        memory = self.client_memory
        return memory.limit, memory.total

    def cpu_times(self):
        t = os.times()
        return t.system, t.user, t.children_system, t.children_user

    def persistence_info(self):
        fields = list(self.persistence.info())
        if self.nodes_path is not None and self.nodes_file_error is not None:  # ours, only while it fails
            fields += [("nodes_file_status", "err"), ("nodes_file_error", self.nodes_file_error)]
        return fields

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

    def struct_sizes(self):
        # The sizes the memory estimate charges (INFO used_memory): the
        # same on every runtime (PyPy has no sys.getsizeof).
        from ..core.memory import JOB_OVERHEAD, QUEUE_OVERHEAD

        return b"bits:64 job:%d queue:%d" % (JOB_OVERHEAD, QUEUE_OVERHEAD)


class DisqueNodeService(MultiService):
    """A Disque node.  ``config`` is a :class:`disque.config.Config`.

    Building it makes the strategies (``persistence``,
    ``federation-policy``), parses the endpoint strings and loads the node
    file and the AOF; a bad strategy, endpoint string, node file or AOF
    raises then (``StrategyError``, ``EndpointError``, ``NodeFileError``,
    ``LoadError``), before anything listens.  Starting it starts its
    children in order: the client listeners (the first one's port is the
    port the node advertises), the bus listeners, the periodic tick (whose
    first run, at once, opens the links to the peers of the node file) and
    the heap freezer.

    An AOF too big to load at once (``IPersistence.begin_load``) loads
    after the service starts, a slice of ``LOAD_SLICE`` seconds per reactor
    turn, as the original loads with its event loop running: the client
    and HTTP listeners serve at once, clients get ``-LOADING`` but for
    INFO, COMMAND, AUTH, SHUTDOWN and LATENCY (the original's ``loading``
    commands), INFO shows the progress; the bus listeners are bound but
    close peers' connections, and the tick (the links, the cluster's
    cron, the jobs' timers) starts only with the state loaded.  :meth:`when_loaded` tells when; a file found unusable
    half way logs the error and stops the node (``on_shutdown``)."""

    name = "disque"

    def __init__(self, config, reactor=None, on_shutdown=None, node_id=None):
        super().__init__()
        if reactor is None:
            from twisted.internet import reactor
        self.config = config
        self.reactor = reactor
        self._on_shutdown = on_shutdown or self._stop_reactor
        self._forget = node_log.follow(config)  # first: what follows may log
        self.persistence = make_strategy(IPersistenceFactory, config["persistence"], config)
        self.persistence.reactor = reactor  # everysec fsyncs and incremental rewrites
        federation = make_strategy(IFederationPolicyFactory, config["federation-policy"], config)
        http_frontend = (make_strategy(IHTTPFrontendFactory, config["http-frontend"], config)
                         if config["http-port"] else None)
        self.tls = TLSContexts(config) if tls_enabled(config) else None  # reads the files: TLSError
        tls_cluster = config["tls-cluster"]
        self.connector = BusConnector(reactor, config, self.tls.client() if tls_cluster else None)
        client_endpoints = [(server_endpoint(reactor, "listen", d), d) for d in client_descriptions(config)]
        tls_endpoints = [(TLSServerEndpoint(server_endpoint(reactor, "tls-port", d), self.tls.server("clients")),
                          d + " (TLS)") for d in tls_descriptions(config)]
        # The first client listener's port is the one the node advertises.
        client_endpoints = tls_endpoints + client_endpoints if tls_cluster else client_endpoints + tls_endpoints
        bus_endpoints = [(server_endpoint(reactor, "cluster-listen", d), d) for d in config["cluster-listen"]]
        self._forget.append(config.on_change("cluster-password", self._closed_bus))  # before anything loads
        nodes_path = os.path.join(config["dir"], config["cluster-config-file"])
        for path in remove_stale_temps(files.OS, nodes_path):
            log.info("Removed {path}, left by a save the node did not finish", path=path)
        saved = load_nodes_file(nodes_path) if node_id is None else None
        if saved is not None:
            node_id = saved[0]
        runtime = self.runtime = NodeRuntime(config, reactor, self.persistence, self._on_shutdown, node_id, nodes_path)
        if saved is not None:
            runtime.node.cluster.restore(saved[1], saved[2], runtime.node.now)
        else:
            runtime.node.cluster.dirty = True  # a new node: write its ID down
        # Jobs from the AOF before anything listens (a bad file stops start-up
        # here, where twistd's option handling reports it in one line), or
        # a big file's load, run in slices once the service starts.
        self._load_step = self.persistence.begin_load(runtime.node)
        self._load_call = None
        self._load_waiters = []
        if self._load_step is None:
            self._log_loaded()
        else:
            runtime.start_loading()
        runtime.node.federation.policy = federation
        self._forget.append(config.on_change("appendonly", self._set_appendonly))
        if self.tls is not None:
            for name in RELOADABLE:
                self._forget.append(config.on_change(name, self._tls_reloader()))

        clients = RespFactory(runtime)
        self.listeners = [Listener(endpoint, clients, d) for endpoint, d in client_endpoints]
        bus = BusServerFactory(runtime)
        if not bus_endpoints:  # derived: beside the client port, known once it listens
            bus_endpoints = [(DeferredEndpoint(reactor, "cluster-listen", lambda i=i: self._bus_description(i)),
                              "tcp:<client port + 10000>") for i in range(len(bus_descriptions(config, 0)))]
        if tls_cluster:  # mutual TLS: no byte of a peer without the CA's certificate reaches BusProtocol
            bus_endpoints = [(TLSServerEndpoint(endpoint, self.tls.server("bus-server")), d + " (TLS)")
                             for endpoint, d in bus_endpoints]
        self.bus_listeners = [Listener(endpoint, bus, d) for endpoint, d in bus_endpoints]
        self.http_listener = None
        if http_frontend is not None:  # the HTTP side (disque/http/): off while http-port is 0
            from twisted.internet.endpoints import quoteStringArgument

            from ..http.access import AccessSite

            description = "tcp:%d:interface=%s" % (config["http-port"], quoteStringArgument(config["http-bind"]))
            site = AccessSite(http_frontend.resource(self), runtime)
            endpoint = server_endpoint(reactor, "http-port", description)
            if config["http-tls"]:
                endpoint = TLSServerEndpoint(endpoint, self.tls.server("http"))
            self.http_listener = Listener(endpoint, site, description + (" (HTTPS)" if config["http-tls"] else
                                                                         " (HTTP)"))
        for listener in self.listeners + self.bus_listeners + ([self.http_listener] if self.http_listener else []):
            listener.setServiceParent(self)
        self.cron = TimerService(1.0 / max(config["hz"], 1), self._cron_tick)
        self.cron.clock = reactor
        if self._load_step is None:  # (else the tick waits for the jobs: _loaded)
            self.cron.setServiceParent(self)
        freezer = heap_freezer(reactor, config["gc-freeze-interval"])
        if freezer is not None:  # (while loading too: what each second loaded is frozen, so the
            freezer.setServiceParent(self)  # collector's full collections do not walk it again and again)
        IdleClients(runtime).setServiceParent(self)
        Watchdog(config, reactor).setServiceParent(self)

    def _log_loaded(self):
        if len(self.runtime.node.jobs):
            log.info("DB loaded from append only file: {n} jobs", n=len(self.runtime.node.jobs))

    # -- loading the AOF in the background -----------------------------------

    @property
    def loading(self):
        """True while the AOF loads in the background."""
        return self._load_step is not None

    def when_loaded(self):
        """A Deferred that fires (None) once the node has its state and
        serves every command, or fails with the ``LoadError`` that stopped
        the load; it never fires if the service stops first."""
        if self._load_step is None:
            return defer.succeed(None)
        d = defer.Deferred()
        self._load_waiters.append(d)
        return d

    def _load_slice(self):
        self._load_call = None
        runtime = self.runtime
        if self._load_step is None or runtime.shutting_down:
            return
        try:
            done = self._load_step(LOAD_SLICE)
        except Exception as e:
            self._load_failed(e)
            return
        if done:
            self._loaded()
        else:
            self._load_call = self.reactor.callLater(0, self._load_slice)

    def _loaded(self):
        """The state is back: serve everyone, then start what waited."""
        self._load_step = None
        runtime = self.runtime
        runtime.finish_loading()
        runtime.set_time()
        runtime.node.persist = self.persistence.enabled
        self._log_loaded()
        self.cron.setServiceParent(self)  # started at once: the first tick runs now (the links, the cron)
        runtime.after_batch()  # the jobs' timers
        log.info("Disque {version} node {id} ready to accept connections on {where}",
                 version=DISQUE_VERSION, id=runtime.node.my_id.decode(), where=self._where())
        waiters, self._load_waiters = self._load_waiters, []
        for d in waiters:
            d.callback(None)

    def _load_failed(self, error):
        """The file turned out unusable half way (or the load broke): the
        node cannot serve this state.  Log it in one line (a traceback for
        anything but a LoadError) and stop."""
        self._load_step = None
        if isinstance(error, LoadError):
            log.error("{error}", error=str(error))
        else:
            log.failure("Loading the AOF failed", failure=Failure(error))
        waiters, self._load_waiters = self._load_waiters, []
        for d in waiters:
            d.errback(error)
        self._on_shutdown()

    def _bus_description(self, index):
        if self.listening_port is None:
            raise ValueError("the cluster bus listens on the client port + 10000, and no client listener "
                             "has a port: set cluster-listen")
        return bus_descriptions(self.config, self.listening_port)[index]

    def _closed_bus(self, password):
        """``cluster-password``, at start-up and at each CONFIG SET: a bus
        reachable beyond loopback is not left open (listeners.open_bus_refusal)."""
        refusal = open_bus_refusal(self.config, password)
        if refusal is not None:
            raise ConfigSetError(refusal.encode())

    def _tls_reloader(self):
        """An applier that rebuilds the TLS contexts at CONFIG SET (not at
        registration: they were just built).  A set that leaves them
        unusable (a missing file, a key of another certificate) is refused
        and the old ones stay."""
        registered = []

        def reload(value):
            if not registered:
                registered.append(True)
                return
            try:
                self.tls.reload()
            except TLSError as e:
                raise ConfigSetError(b"Unable to update TLS configuration: " + str(e).encode()) from None
            log.info("TLS certificates reloaded: new connections use them")
        return reload

    def _set_appendonly(self, enabled):
        node = self.runtime.node
        self.persistence.set_enabled(bool(enabled), node)
        if enabled and not self.persistence.enabled:
            raise ConfigSetError(b"Unable to turn on AOF: this node keeps no file (persistence %s)"
                                 % self.config["persistence"].partition(":")[0].encode())
        # (Not while the AOF loads: the records it applies are not written back.)
        node.persist = self.persistence.enabled and self._load_step is None

    def _set_hz(self, hz):
        """The periodic tick runs ``hz`` times a second (restarted when that
        changes)."""
        step = 1.0 / max(hz, 1)
        if step == self.cron.step:
            return
        self.cron.step = step
        if self.cron.running:
            self.cron.stopService()
            self.cron.startService()

    def _stop_reactor(self):
        if self.reactor.running:
            self.reactor.stop()

    @property
    def node(self):
        return self.runtime.node

    @property
    def listening_port(self):
        """The port the node advertises: the first client listener's, once
        it listens."""
        for listener in self.listeners:
            port = listening_port(listener)
            if port is not None:
                return port
        return None

    def startService(self):
        runtime = self.runtime
        runtime.set_time()
        if self._load_step is None:  # (else once loaded: no record is written back meanwhile)
            runtime.node.persist = self.persistence.enabled
        runtime.links = Links(self.reactor, runtime, self.connector)
        # The listeners before the other children (under twistd they listen
        # already, from privilegedStartService): the first tick, which runs
        # as the tick's TimerService starts, writes the node file and opens
        # the links, so the port the node advertises must be known by then.
        # Starting a listener twice is harmless: it listens once.
        for listener in self.listeners + self.bus_listeners:
            listener.startService()
        port = self.listening_port
        runtime.node.cluster.myself.port = self.config["port"] if port is None else port
        bus_ports = [listening_port(listener) for listener in self.bus_listeners]
        if port is not None and port + BUS_PORT_OFFSET not in bus_ports:
            log.warn("No cluster-listen endpoint listens on port {bus} (client port {port} + 10000): "
                     "peers will not reach this node's bus", bus=port + BUS_PORT_OFFSET, port=port)
        super().startService()
        self._forget.append(self.config.on_change("hz", self._set_hz))
        if self._load_step is not None:
            log.info("Disque {version} node {id} loading the AOF; meanwhile clients on {where} get -LOADING",
                     version=DISQUE_VERSION, id=runtime.node.my_id.decode(), where=self._where())
            self._load_call = self.reactor.callLater(0, self._load_slice)
            return
        log.info("Disque {version} node {id} ready to accept connections on {where}",
                 version=DISQUE_VERSION, id=runtime.node.my_id.decode(), where=self._where())

    def _where(self):
        """Where clients connect, for the log."""
        port = self.listening_port
        where = "port %d" % port if port is not None else ", ".join(l.description for l in self.listeners)
        tls_port = self.config["tls-port"]
        if tls_port:
            where += " (TLS)" if tls_port == port else ", TLS port %d" % tls_port
        return where

    def _cron_tick(self):
        """The periodic work, ``hz`` times a second (see _set_hz)."""
        self.runtime.tick()

    def stopService(self):
        for forget in self._forget:
            forget()
        self._forget = []
        if self._load_call is not None and self._load_call.active():
            self._load_call.cancel()  # (persistence.close() abandons the load)
        self._load_call = None
        node_log.reset()
        self.runtime.end_turn_now()  # what this turn kept leaves before the connections close
        stopped = super().stopService()  # the timers, then the listeners
        for client in list(self.runtime.ctx.clients.values()):
            client.conn.close()
        deferreds = [stopped]
        if self.runtime.links is not None:
            deferreds.append(self.runtime.links.stop_all())
            self.runtime.links = None
        self.persistence.close()
        from twisted.internet.defer import DeferredList

        return DeferredList(deferreds)


class NodeFileError(Exception):
    """The node file exists but cannot be used: start-up stops."""


def load_nodes_file(path):
    """``(my_id, leaving, peers)`` from the node file, or None if there is
    none yet."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise NodeFileError("cannot read the node file %s: %s" % (path, e.strerror))
    try:
        return parse_nodes_file(text)
    except ValueError as e:
        raise NodeFileError("bad node file %s: %s (fix or remove it)" % (path, e))
