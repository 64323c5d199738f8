"""zope.interface declarations: the seams between the core and the world.

Strategy plugins follow ``twisted.cred.strcred``: a *factory* interface with
a ``name`` (what operators write in the config) and an ``argStringFormat``,
found by name with ``twisted.plugin.getPlugins`` (see ``disque.plugins``).
"""

from zope.interface import Attribute, Interface


class IStrategyFactory(Interface):
    name = Attribute("Name used in config files and on the command line.")
    description = Attribute("One line describing the strategy.")
    argStringFormat = Attribute("One line describing the argument string, e.g. 'fsync=always|everysec|no'.")


class IPersistence(Interface):
    """Where a node's job log goes (the AOF, or nowhere)."""

    enabled = Attribute("True when records are being written.")

    def load(node):
        """Replay stored records into ``node`` at start-up; return job count."""

    def append(record):
        """Persist one record (``("LOADJOB", job)`` or ``("DELJOB", job_id)``)."""

    def flush():
        """Called after each batch of commands (group commit point)."""

    def rewrite(node):
        """Compact the log from the node's current state; return a status reply."""

    def info():
        """(name, value) pairs for INFO persistence."""

    def close():
        """Flush and release files (on shutdown)."""


class IPersistenceFactory(IStrategyFactory):
    def makePersistence(argstring, config):
        """Return an :class:`IPersistence` provider."""


class IClientTransport(Interface):
    """How the node listens for clients (TCP now; TLS is another provider)."""

    def listen(reactor, host, port, factory, backlog):
        """Start listening; return the ``IListeningPort``."""


class IClientTransportFactory(IStrategyFactory):
    def makeTransport(argstring, config):
        """Return an :class:`IClientTransport` provider."""


class IBusTransport(Interface):
    """How the cluster bus listens and connects (TCP now; TLS is another
    provider of the same interface, with no change to the core)."""

    def listen(reactor, host, port, factory, backlog):
        """Start listening for peers; return the ``IListeningPort``."""

    def endpoint(reactor, host, port, bind_host):
        """An ``IStreamClientEndpoint`` to the peer bus at ``host``:``port``
        whose connections originate from ``bind_host`` (None: any)."""


class IBusTransportFactory(IStrategyFactory):
    def makeBusTransport(argstring, config):
        """Return an :class:`IBusTransport` provider."""


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
    def makePolicy(argstring, config):
        """Return an :class:`IFederationPolicy` provider for one node."""


class INodeHost(Interface):
    """What command handlers need from the process hosting the node."""

    def now_us():
        """Wall clock, microseconds."""

    def process_info():
        """Mapping with the INFO server fields that come from the process."""

    def memory():
        """(used_memory, rss, peak) in bytes."""

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
        """DEBUG FLUSHALL happened (persistence may truncate its log)."""

    def struct_sizes():
        """DEBUG STRUCTSIZE text."""
