"""zope.interface declarations: the seams between the core and the world.

Strategy plugins follow ``twisted.cred.strcred``: a *factory* (an
:class:`IStrategyFactory`, itself a Twisted ``IPlugin``) states its
``name`` (what operators write in the config), a one-line ``description``
and its ``argStringFormat`` once, on itself; ``disque.plugins`` finds it by
name with ``twisted.plugin.getPlugins`` and calls ``make(argstring,
config)`` with what follows the first colon of ``"name:args"``.

Listeners and the cluster bus are not strategies of this project: they are
Twisted endpoint strings (``disque.node.listeners``), Twisted's own plugin seam.
"""

from twisted.plugin import IPlugin
from zope.interface import Attribute, Interface


class LoadError(Exception):
    """Stored state cannot be loaded (``IPersistence.load``): start-up
    stops, and ``str()`` of the error is the one line the operator sees."""


class IStrategyFactory(IPlugin):
    """Makes one kind of strategy; listed by a dropin in ``twisted/plugins``.

    Invariant: everything an operator can learn about a strategy (name,
    description, argument format) is stated here once; ``twistd disque
    --help-strategies`` prints exactly these attributes."""

    name = Attribute("Name used in config files and on the command line.")
    description = Attribute("One line describing the strategy.")
    argStringFormat = Attribute("One line describing the argument string, e.g. "
                                "'rewrite-step=<jobs>', or 'No arguments.'.")

    def make(argstring, config):
        """Return the strategy configured by ``argstring`` (``""`` when none
        was given) and ``config`` (a ``disque.config.Config``).  Raise
        ``disque.plugins.StrategyError`` for an argument string it does not
        accept: start-up stops with that message."""


class IPersistence(Interface):
    """Where a node's job log goes (the AOF, or nowhere).  Everything the
    service calls is declared here; providers need not implement more."""

    enabled = Attribute("True when records are being written.")
    reactor = Attribute("The reactor for work off the request path (fsyncs in a thread, "
                        "incremental rewrites); the service sets it before begin_load().  None "
                        "(in tests): such work does not happen.")
    on_error = Attribute("Set by the service: a callable the provider calls with an OSError when "
                         "records stop reaching the disk (a failed write or fsync), and with None "
                         "once they do again; meanwhile the node answers writes with -MISCONF.")

    def load(node):
        """Replay stored records into ``node``, all at once; return the
        number of records applied.  Raise :class:`LoadError` when the stored
        state is unusable (start-up stops)."""

    def begin_load(node):
        """What the service calls at start-up: replay stored records into
        ``node``.  Return None when that is done already (nothing to load,
        or little enough to load at once, before the node listens, as
        :meth:`load` does), or a function ``step(seconds)`` that the service
        calls once per reactor turn while clients get ``-LOADING``: it
        applies records for about ``seconds`` and returns True once the load
        is complete (as :meth:`load` would leave it).  Both raise
        :class:`LoadError` when the stored state is unusable (start-up
        stops; from ``step``, the node stops).  While a load runs,
        :meth:`info` shows its progress and :meth:`close` abandons it."""

    def append(record):
        """Persist one record (``("LOADJOB", job)``, ``("DELJOB", job_id)``
        or ``("CATALOG", entry)``, a catalog entry that won here)."""

    def flush():
        """Called after each batch of commands (the group commit point,
        before the batch's replies leave) and every tick.  Return False when
        records appended so far are not as durable as the provider promises
        (its error state): the service then holds the replies of the turns
        that appended records until a later flush returns True."""

    def error_text():
        """Why records do not reach the disk (the -MISCONF reason), or None."""

    def rewrite(node):
        """Compact the log from the node's current state, in the background;
        return the encoded reply of BGREWRITEAOF."""

    def rewrite_now(node, controlled):
        """SHUTDOWN REWRITE-AOF: write the whole state now, blocking (no
        client is served any more); ``controlled``: mark it so the next
        start puts queued jobs back in their queues.  Raise ``OSError`` when
        it cannot be written (the shutdown is refused)."""

    def maybe_auto_rewrite(node):
        """Called every tick while records are being written: start a
        rewrite if the log grew past the configured limits."""

    def set_enabled(enabled, node):
        """CONFIG SET appendonly: start or stop writing records; afterwards
        ``enabled`` says what the provider actually does (a provider that
        cannot write stays disabled)."""

    def info():
        """(name, value) pairs for INFO persistence."""

    def close():
        """Flush and release files (on shutdown)."""


class IPersistenceFactory(IStrategyFactory):
    """``make`` returns an :class:`IPersistence` provider (``persistence``
    directive)."""


class IFederationState(Interface):
    """A policy's per-queue state, kept in ``Queue.fed``; QSTAT and QSCAN
    IMPORTRATE read it."""

    def sources():
        """Node IDs jobs of this queue were recently imported from."""

    def import_rate(now):
        """Jobs imported per second, around ``now`` (ms)."""


class IFederationPolicy(Interface):
    """Decides whom a node asks for jobs (NEEDJOBS), when, and how many jobs
    it gives when asked.  Pure like the core: it gets the time and the
    facts, returns decisions; the core sends the messages.  It never sees a
    socket or the reactor."""

    def wanted(queue, now, reason, peers, waiting):
        """A consumer found ``queue`` (a ``disque.core.queue.Queue``) empty.
        ``reason`` is ``"waiting"`` (clients blocked on it, or a GETJOB found
        nothing), ``"zero"`` (a GETJOB just took its last job) or
        ``"zero-blocked"`` (a blocked client just took its last job); ``peers``
        are the IDs of reachable, non-leaving peers; ``waiting`` is the
        number of clients blocked on it.  Return a sequence of
        ``(node_ids, count)`` requests: send NEEDJOBS(queue, count) to those
        nodes (an empty sequence: ask nobody now).  The policy may create
        ``queue.fed`` (an ``IFederationState``)."""

    def received(queue, sender, count, now):
        """YOURJOBS brought ``count`` jobs of ``queue`` from ``sender``."""

    def to_serve(queue, requester, count, now):
        """NEEDJOBS(queue, count) from ``requester``; ``queue`` has jobs and
        is not paused in output.  Return how many to send (0 to decline)."""


class IFederationPolicyFactory(IStrategyFactory):
    """``make`` returns an :class:`IFederationPolicy` provider for one node
    (``federation-policy`` directive)."""


class IHTTPFrontend(Interface):
    """What a node serves over HTTP at ``http-port`` (``http-frontend``
    directive): a twisted.web resource tree, in the node's reactor."""

    def resource(service):
        """The root ``IResource`` for ``service`` (the
        ``disque.node.service.DisqueNodeService`` being built; its ``runtime`` is
        ready).  The service puts :class:`disque.http.access.AccessSite` in
        front of it (security headers, the Host check, protected mode,
        authentication): a request that reaches the tree has
        ``request.acl_user``, the ``disque.access.acl.User`` it runs as, whose
        permissions the tree checks."""


class IHTTPFrontendFactory(IStrategyFactory):
    """``make`` returns an :class:`IHTTPFrontend` provider."""


class INodeRuntime(Interface):
    """What command handlers need from the process hosting the node."""

    def now_us():
        """Wall clock, microseconds."""

    def client_auth_failed(source):
        """A client at address ``source`` sent a wrong password: count it
        and log it, at most once a minute per source; return how many
        seconds its answer must wait (0.0: none), the source having failed
        too often in a row (:mod:`disque.access.failed_auth`)."""

    def client_auth_succeeded(source):
        """A client at address ``source`` gave a right password: its
        failures are forgotten."""

    def auth_refusal(source):
        """None if a client at ``source`` may try a password, else the
        error reply refusing it unchecked (counted): it failed too often
        within a minute."""

    def auth_gate(client):
        """:meth:`auth_refusal` for a ``ClientState`` (AUTH asks it first)."""

    def auth_failed(client, reply):
        """A wrong AUTH from ``client``: counted and logged; ``reply``, or
        a ``ReplySlot`` that delivers it once the delay is over."""

    def auth_succeeded(client):
        """A right AUTH from ``client``."""

    def process_info():
        """Mapping with the INFO server fields that come from the process."""

    def memory():
        """(used_memory, rss, peak) in bytes."""

    def clients_memory():
        """(limit, total): ``maxmemory-clients`` in bytes (0: none) and
        what the client connections hold together (0 while there is no
        limit: nothing is counted then)."""

    def cpu_times():
        """(sys, user, children sys, children user) seconds."""

    def persistence_info():
        """(name, value) pairs for INFO persistence."""

    def shutdown(mode):
        """Stop the node ('' | 'save' | 'nosave' | 'rewrite-aof'); return an
        error message (bytes) if refused, else None."""

    def bgrewriteaof():
        """Start an AOF rewrite; return the encoded reply."""

    def sleep(seconds):
        """DEBUG SLEEP: block the node for ``seconds``."""

    def pause_clients(ms):
        """CLIENT PAUSE: stop serving clients for ``ms`` milliseconds."""

    def flushed():
        """DEBUG FLUSHALL dropped every job: the persistent log, if any,
        must forget them too (a restart brings nothing back)."""

    def struct_sizes():
        """DEBUG STRUCTSIZE text."""

    def save_nodes():
        """CLUSTER SAVECONFIG: save the node file now; an error text or None."""


class IConnectionHost(Interface):
    """What every protocol of the node (client or bus) reads where it is
    hosted: its connections keep their output (disque.io.batch_output) in
    ``effects.pending_output`` until the batch ends."""

    reactor = Attribute("The reactor: the clock, delayed calls, deadlines.")
    effects = Attribute("The effects and output batching (disque.node.effects).")
    loading = Attribute("True while the AOF loads in the background (peers' connections are closed).")


class IClientRuntime(INodeRuntime, IConnectionHost):
    """What a client protocol (RESP, the HTTP side) may ask of the node
    (:class:`disque.node.runtime.NodeRuntime`), beyond the handlers' needs."""

    config = Attribute("The node's disque.config.Config.")
    ctx = Attribute("The command Context (clients, stats, ACL).  A protocol reads the node's state "
                    "through disque.commands.views, which take it (the HTTP side's pages and /metrics), "
                    "and changes it through run_command alone.")
    client_memory = Attribute("maxmemory-clients' accounting (disque.node.client_memory).")
    counting_clients = Attribute("True while maxmemory-clients is set: connections report what they hold.")
    output_limits = Attribute("client-output-buffer-limit's normal class, read at each batch.")
    query_buffer_limit = Attribute("client-query-buffer-limit, in bytes.")
    max_bulk_len = Attribute("proto-max-bulk-len, in bytes.")
    paused_until = Attribute("Node time (ms) CLIENT PAUSE lasts until; 0: not paused.")
    failed_auth = Attribute("Failed authentications, counted and logged (disque.access.failed_auth).")
    auth_throttle = Attribute("Sources refused after failing too often (disque.access.failed_auth.Throttle).")
    census = Attribute("The cluster view's counts (disque.node.census.Census): ``gather`` asks the peers for "
                       "theirs over the bus, ``counts`` gives this node's.")

    def run_command(client, argv):
        """The one front door: run the request ``argv`` (a list of bytes)
        for ``client`` (a ``disque.commands.context.ClientState``) through
        the dispatch in force, which applies the checks (authentication,
        ACL, -LOADING, -MISCONF, OOM) and feeds MONITOR, the slow log and
        the command statistics; serve the clients its jobs unblock.
        Returns bytes, ``BLOCKED`` or a ``ReplySlot``
        (disque.contract).  No request runs a handler another way.
        (A bound callable, swapped with the node's state: fetch it anew for
        each batch.)"""

    run_of_commands = Attribute("A context manager around requests run one after the other (a read's "
                                "pipeline): their times share clock reads "
                                "(disque.commands.dispatcher.run_of_commands).")

    def set_time():
        """Set the core's clock from the reactor: a batch of work begins.
        Returns that time (ms)."""

    def now_ms():
        """The time of the batch in progress (ms), as set_time set it."""

    def after_batch():
        """A batch of work is done: run its effects, let its output leave."""

    def clients_paused():
        """Whether CLIENT PAUSE is in force now."""

    def wait_unpause(proto):
        """Call ``proto.resume()`` once CLIENT PAUSE ends."""


class IBusHub(IConnectionHost):
    """What the cluster bus protocol and links may ask of the node
    (:class:`disque.node.bushub.BusHub`)."""

    bus_sendbuf_limit = Attribute("cluster-link-sendbuf-limit, in bytes (0: none).")

    def bus_batch_begin():
        """A read of frames begins (the core's clock is set once for it)."""

    def bus_batch_end():
        """The read is done: its effects run, its output leaves."""

    def bus_message(header, msg, link):
        """A decoded message from the peer on ``link``."""

    def bus_member(node_id):
        """Whether ``node_id`` is a member of the cluster."""

    def bus_inbound(protocol):
        """A connection to our bus port carries the frames of a member."""

    def bus_inbound_lost(protocol):
        """Such a connection is gone."""

    def bus_link_up(node_id):
        """Our link to ``node_id`` is up."""

    def bus_link_lost(protocol):
        """A link's connection is gone."""

    def bus_handshake(initiator):
        """The ``cluster-password`` handshake for a new connection, or None."""

    def bus_auth_failed(source, reason):
        """A bus connection from ``source`` failed to authenticate."""
