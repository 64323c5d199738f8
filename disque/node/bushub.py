"""The bus hub: what the cluster bus protocol and links ask of the node, and
the choice of bus version per peer.

The bus protocols (``disque.bus.protocol``) and the links
(``disque.bus.links``) talk to one :class:`BusHub` (their ``runtime``),
never to the runtime directly: frames read, links up and lost, inbound
connections, the ``cluster-password`` handshake and failed bus
authentications.  Messages go to the core with the node's clock set, and
each read (a batch) ends with the runtime's ``after_batch``.

Version choice (:meth:`BusHub.frame`): job records go in bus version 3 to
a peer that announced it reads it, the cluster view's COUNTSASK and COUNTS
in version 4 and REPLJOBS and GOTJOBS in version 5 to a peer that announced it reads
that, everything else in version 2, which every node reads
(``disque.bus.wire``).  Invariant: a message is encoded
once per version and drain round, however many receivers.
"""

from zope.interface import implementer

from ..bus import auth as bus_auth, wire
from ..core import messages
from ..interfaces import IBusHub
from ..io.logs import logger

log = logger("disque")

# The messages written in a version newer than 2, and the peer flag
# (disque.core.cluster_node) that says the peer reads it: version 3 changed
# REPLJOB and YOURJOBS (job options) and added NACKDELAY, 4 added COUNTSASK
# and COUNTS, 5 REPLJOBS and GOTJOBS, 6 SETTINGS, SETTINGSSUM and QDEMAND.
_NEEDS = {
    messages.ReplJob: (wire.EXTENSIONS, "extensions"), messages.YourJobs: (wire.EXTENSIONS, "extensions"),
    messages.NackDelay: (wire.EXTENSIONS, "extensions"),
    messages.CountsAsk: (4, "counts"), messages.Counts: (4, "counts"),
    messages.GotJobs: (wire.BATCHES, "batches"), messages.ReplJobs: (wire.BATCHES, "batches"),
    messages.Settings: (wire.SETTINGS, "settings"), messages.SettingsSum: (wire.SETTINGS, "settings"),
    messages.QDemand: (wire.SETTINGS, "settings"),
}


@implementer(IBusHub)
class BusHub:
    """The bus side of one :class:`disque.node.runtime.NodeRuntime`."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.node = runtime.node
        self.reactor = runtime.reactor
        self.bus_sendbuf_limit = 0  # cluster-link-sendbuf-limit (followed by the runtime)
        self.nonces = bus_auth.Nonces()
        self._frames = {}  # bus frames encoded in the current drain round, by (message, version)
        self._batch = 0  # >0 while a bus read is being handed to the core

    @property
    def effects(self):
        """Where the bus protocols keep their output (disque.io.batch_output)."""
        return self.runtime.effects

    @property
    def loading(self):
        """True while the AOF loads: peers' connections are closed."""
        return self.runtime.loading

    # -- frames in -----------------------------------------------------------

    def bus_batch_begin(self):
        self._batch += 1
        self.runtime.set_time()

    def bus_batch_end(self):
        self._batch -= 1
        if not self._batch:
            self.runtime.after_batch()

    def bus_message(self, header, msg, link):
        runtime = self.runtime
        if not self._batch:
            runtime.set_time()
        self.node.bus_receive(header, msg, link)
        if not self._batch:
            runtime.after_batch()

    def bus_member(self, node_id):
        """Whether ``node_id`` is a member of the cluster (the bus protocol
        then takes its connection as that member's)."""
        return self.node.cluster.is_member(node_id)

    # -- connections ---------------------------------------------------------

    def bus_inbound(self, protocol):
        """A connection to our bus port carries the frames of a member."""
        links = self.runtime.links
        if links is not None:
            links.inbound_from(protocol, protocol.sender)

    def bus_inbound_lost(self, protocol):
        links = self.runtime.links
        if links is not None:
            links.inbound_lost(protocol)

    def bus_link_up(self, node_id):
        runtime = self.runtime
        runtime.set_time()
        self.node.link_up(node_id)
        runtime.after_batch()

    def bus_link_lost(self, protocol):
        runtime = self.runtime
        if runtime.links is not None and runtime.links.lost(protocol):
            runtime.set_time()
            self.node.link_down(protocol.node_id)
            runtime.after_batch()

    # -- authentication ------------------------------------------------------

    def bus_handshake(self, initiator):
        """The ``cluster-password`` handshake for a new bus connection
        (:mod:`disque.bus.auth`), or None when no password is set.  Read
        at each connection: CONFIG SET applies to the next ones."""
        password = self.runtime.config["cluster-password"]
        if not password:
            return None
        return bus_auth.Handshake(password.encode(), initiator, self.nonces)

    def bus_auth_failed(self, source, reason):
        runtime = self.runtime
        runtime.ctx.stats.bus_auth_failures += 1
        runtime.failed_auth.record("bus", source, reason)

    # -- frames out: the version choice ----------------------------------------

    def reads_batches(self, node_id) -> bool:
        """Whether peer ``node_id`` announced bus version 5 (REPLJOBS, GOTJOBS)."""
        peer = self.node.cluster.nodes.get(node_id)
        return peer is not None and peer.batches

    def repljobs_frame(self, msgs, records) -> bytes:
        """One REPLJOBS frame of the REPLJOB messages ``msgs`` (for a peer
        that reads bus version 5).  ``records``: the job records encoded
        so far, ``id(message) -> (message, bytes)`` (the message kept with
        them, so no other takes its ``id`` meanwhile): a REPLJOB to two
        replicas is encoded once."""
        parts = []
        for msg in msgs:
            known = records.get(id(msg))
            if known is None:
                known = records[id(msg)] = (msg, wire.job_record(msg.job, wire.BATCHES))
            parts.append(known[1])
        return wire.encode_repljobs(self.node.cluster.header(), parts)

    def new_round(self):
        """A drain round begins: the frames of the last one are forgotten."""
        self._frames = {}

    def frame(self, msg, node_id, cached=True):
        """``msg`` encoded for peer ``node_id`` (once per version and
        drain round, however many receivers): a message of ``_NEEDS`` in
        its version to a peer that announced it reads it (job records in
        version 3, COUNTSASK and COUNTS in 4, GOTJOBS and REPLJOBS in 5,
        SETTINGS and SETTINGSSUM in 6), everything else in version 2, which
        every node reads (bus/wire.py).  None for a message the peer
        cannot read (the core does not send them to such peers: a guard).
        ``cached`` False: a message made for one receiver and dropped at
        once (the cache is keyed by ``id(msg)``, which only a message kept
        alive for the whole round keeps to itself)."""
        version = wire.OLDEST_PEER
        kind = type(msg)
        needs = _NEEDS.get(kind)
        if needs is not None and node_id is not None:
            peer = self.node.cluster.nodes.get(node_id)
            if peer is not None and getattr(peer, needs[1]):
                version = needs[0]
            elif kind in wire.FIRST_VERSION:
                log.warn("not sending {kind} to {node}: it runs an older bus version",
                         kind=kind.__name__, node=node_id[:8].decode("ascii", "replace"))
                return None
        if not cached:
            return wire.encode(self.node.cluster.header(), msg, version)
        key = (id(msg), version)
        frames = self._frames
        frame = frames.get(key)
        if frame is None:
            frame = frames[key] = wire.encode(self.node.cluster.header(), msg, version)
        return frame
