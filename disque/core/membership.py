"""The node's view of the cluster (:class:`ClusterView`): the node table,
its gossip, and the links to peers.

Pure, like the rest of the core: every entry point gets the time, and what
must happen on the network is appended to ``outbox`` as effects
(``Send`` to a node, ``SendLink`` on the connection a request came from,
``Link``/``Unlink``/``Rekey`` to open, close or rename the link to a peer).

ClusterView is assembled from the parts of the spec it implements, each in
its own module and working on the view's state:

* :mod:`~disque.core.handshake` -- adding and removing nodes at runtime:
  CLUSTER MEET, handshakes, claims, joins, FORGET, RESET;
* :mod:`~disque.core.failure_detection` -- PFAIL and FAIL;
* :mod:`~disque.core.seeds` -- ``cluster-seeds``, the nodes to join by
  itself (``seeds``, run by the cron);
* :mod:`~disque.core.node_file_format` -- the node file's text;
* :mod:`~disque.core.cluster_node` -- one node's record, node IDs and
  addresses.

This module holds the table (``nodes``), what is read from it, sending,
and the receiving of PING, PONG, MEET and FAIL with their gossip:

* PING, PONG and MEET carry gossip about a few known nodes; a node unknown
  to the receiver starts a handshake with it, so meeting one node of a
  cluster is enough and a chain of MEETs becomes a full mesh.  Gossip also
  carries the PFAIL and FAIL reports failure detection counts.
* A node that joins is announced at the next cron (100 ms) to the members
  linked to: one PING each whose gossip names the nodes joined since
  (``fresh``), rather than at each member's next regular PING (up to 1 s
  later).  So a cluster met by a chain of MEETs is a full mesh in a few
  round trips, whichever handshake ends first.
* Members are the known nodes that are not in handshake: only they count
  (``size``, ``reachable``, copies of jobs), are written to the node file,
  and have their messages acted on (see :mod:`~disque.core.handshake` for
  the rest).

``size`` counts known nodes including myself, handshakes excluded (the
original's ``cluster_size``); ``reachable`` counts peers neither in
handshake nor suspected nor failed (``reachable_nodes_count``, myself
excluded).
"""

import random as _random

from . import messages
from .cluster_node import ClusterNode, new_node_id, valid_address, valid_node_id
from .effects import Send, SendLink, Unlink
from .failure_detection import FailureDetection
from .handshake import MAX_CLAIMS, Handshakes
from .node_file_format import NodeFileFormat, parse_nodes_file
from .seeds import Seeds

# ClusterNode, MAX_CLAIMS, new_node_id and parse_nodes_file stay importable
# from here, where callers have found them since membership was one module.
__all__ = ("ClusterView", "ClusterNode", "MAX_CLAIMS", "new_node_id", "parse_nodes_file")

# What a node in handshake sends (answered, but not acted on).
_HANDSHAKE_KINDS = (messages.Meet, messages.Ping, messages.Pong)
# Nodes named by one announcement of joins (the rest wait for the next cron).
MAX_ANNOUNCED = 32


class ClusterView(Handshakes, FailureDetection, NodeFileFormat):
    """Every node this one knows (``nodes``, myself included) and what it
    believes of each; see the module docstring for the rules."""

    def __init__(self, node_id: bytes, host: bytes = b"", port: int = 0, rng=None):
        self.myself = ClusterNode(node_id, host, port)
        self.nodes = {node_id: self.myself}
        self.leaving = False
        self.node_timeout = 15000
        self.outbox = []  # NodeState shares its own
        self.rng = rng or _random.Random()
        self.blacklist = {}  # node id -> ms until which gossip about it is ignored
        self.dirty = False  # the node file needs saving
        self.seeds = Seeds()  # cluster-seeds (the runtime configures them)
        # Hosts of this node besides the one it advertises (its bind
        # addresses, set by the runtime): a seed there at its port is itself.
        self.own_hosts = frozenset()
        self.fresh = []  # IDs of the nodes joined since the last announcement (cron)
        self.sent = 0
        self.received = 0

    # -- views -------------------------------------------------------------

    @property
    def my_id(self) -> bytes:
        return self.myself.id

    @property
    def size(self) -> int:
        nodes = self.nodes
        if len(nodes) == 1:  # alone (myself is never in handshake)
            return 1
        size = 0  # (a loop, not sum() of a generator: every ADDJOB asks, and PyPy's sum is Python code)
        for n in nodes.values():
            if not n.handshake:
                size += 1
        return size

    @property
    def reachable(self) -> int:
        """Reachable peers, myself excluded."""
        me = self.myself
        return sum(1 for n in self.nodes.values() if n is not me and n.reachable)

    def default_replication(self) -> int:
        """REPLICATE when a job's options give none (ADDJOB, a schedule's
        run): the cluster's size, at most 3, as the original."""
        size = self.size
        return 3 if size > 3 else size

    def room_for_copies(self) -> int:
        """The peers that may take a new copy: reachable and not leaving
        (every ADDJOB that replicates asks)."""
        me = self.myself
        room = 0
        for n in self.nodes.values():
            if n is not me and n.reachable and not n.leaving:
                room += 1
        return room

    def peers(self):
        return [n for n in self.nodes.values() if n is not self.myself]

    def is_member(self, node_id: bytes) -> bool:
        """Whether ``node_id`` is a peer of the cluster: known, not in
        handshake, not myself (see the module docstring)."""
        node = self.nodes.get(node_id)
        return node is not None and not node.handshake and node is not self.myself

    def active_peers(self, extensions: bool = False) -> list:
        """IDs of the reachable peers that are not leaving: the nodes that
        may take new copies of a job and take part in federation (with
        ``extensions``, only those that read job options: bus version 3)."""
        me = self.myself
        return [n.id for n in self.nodes.values()
                if n is not me and n.reachable and not n.leaving and (n.extensions or not extensions)]

    def all_read_extensions(self, node_ids) -> bool:
        """True when none of ``node_ids`` is a known peer of an older
        version (one that cannot read NACKDELAY or job options)."""
        nodes = self.nodes
        me = self.myself
        for node_id in node_ids:
            n = nodes.get(node_id)
            if n is not None and n is not me and not n.extensions:
                return False
        return True

    def header(self) -> messages.Header:
        me = self.myself
        return messages.Header(me.id, me.host, me.port,
                               (messages.H_LEAVING if self.leaving else 0) | messages.H_EXTENSIONS
                               | messages.H_COUNTS | messages.H_BATCHES | messages.H_SETTINGS)

    # -- sending -----------------------------------------------------------

    def send(self, node_id: bytes, msg) -> None:
        self.sent += 1
        self.outbox.append(Send(node_id, msg))

    def send_to_copies(self, job, msg) -> None:
        """``msg`` to every other node that may hold a copy of ``job``."""
        me = self.myself.id
        for node_id in job.delivered:
            if node_id != me:
                self.send(node_id, msg)

    def copies_unheard(self, job) -> bool:
        """True while a node that may hold a copy of ``job`` counts as
        reachable (neither suspected, failed nor in handshake) but our link
        to it is not up yet: a message sent now would not reach it, and it
        may know of an acknowledgement or a queued copy."""
        me = self.myself.id
        nodes = self.nodes
        for node_id in job.delivered:
            if node_id != me:
                peer = nodes.get(node_id)
                if peer is not None and not peer.connected and peer.reachable:
                    return True
        return False

    def broadcast(self, msg, reachable_only=False) -> None:
        for n in self.peers():
            if n.handshake or (reachable_only and not n.reachable):
                continue
            self.send(n.id, msg)

    def _pick_gossip(self, exclude: bytes, first=()):
        """A few random known nodes (at least 3, or a tenth of the cluster),
        after the members ``first`` (an announcement's)."""
        candidates = [n for n in self.nodes.values() if not n.handshake and n.id != exclude and n not in first]
        k = min(len(candidates), max(3, len(self.nodes) // 10))
        picked = self.rng.sample(candidates, k) if k < len(candidates) else candidates
        out = []
        for n in [*(n for n in first if n.id != exclude), *picked]:
            flags = (messages.G_PFAIL if n.pfail else 0) | (messages.G_FAIL if n.fail else 0) | \
                    (messages.G_LEAVING if (n.leaving or (n is self.myself and self.leaving)) else 0)
            out.append(messages.Gossip(n.id, n.host, n.port, flags))
        return tuple(out)

    def _send_ping(self, node, now, kind=messages.Ping) -> None:
        if node.ping_sent == 0:
            node.ping_sent = now
        node.last_ping = now
        self.send(node.id, kind(self._pick_gossip(node.id)))

    def send_meet(self, node, now) -> None:
        """A MEET to the member ``node`` on our link: a node that does not
        have us in its table takes it as a claim (the seeds' way back into
        a cluster that forgot this node); one that has us, as a PING."""
        self._send_ping(node, now, messages.Meet)

    def _announce_joins(self) -> None:
        """One PING to each member linked to, whose gossip names the nodes
        that joined since the last announcement (see the module docstring)."""
        fresh, self.fresh = self.fresh[:MAX_ANNOUNCED], self.fresh[MAX_ANNOUNCED:]
        nodes = self.nodes
        joined = [nodes[i] for i in fresh if i in nodes and not nodes[i].handshake]
        if not joined:
            return
        for node in list(nodes.values()):
            if node is not self.myself and not node.handshake and node.connected \
                    and any(n is not node for n in joined):
                # (not a PING of failure detection: its times stay those of the regular PINGs)
                self.send(node.id, messages.Ping(self._pick_gossip(node.id, joined)))

    # -- commands (MEET, FORGET and RESET: handshake.py) ------------------

    def set_leaving(self, leaving: bool) -> None:
        if leaving != self.leaving:
            self.leaving = leaving
            self.myself.leaving = leaving
            self.dirty = True

    # -- links -------------------------------------------------------------

    def link_up(self, node_id: bytes, now: int) -> None:
        node = self.nodes.get(node_id)
        if node is None:
            self.outbox.append(Unlink(node_id))
            return
        node.connected = True
        self._send_ping(node, now, messages.Meet if node.meet else messages.Ping)

    def link_down(self, node_id: bytes) -> None:
        node = self.nodes.get(node_id)
        if node is not None:
            node.connected = False
            node.settings_synced = False

    # -- receiving ---------------------------------------------------------

    def receive(self, header: messages.Header, msg, link, now: int) -> bool:
        """Process a membership message; return whether the sender is a
        member (the messages of anyone else are not acted on)."""
        self.received += 1
        kind = type(msg)
        sender = self.nodes.get(header.sender)
        via = getattr(link, "node_id", None)
        if via is not None and kind is messages.Pong:
            pending = self.nodes.get(via)
            if pending is not None and pending.handshake:
                sender = self._complete_handshake(pending, header, link)
        if kind is messages.Meet or kind is messages.Ping:
            if not self.myself.host and getattr(link, "local_host", b""):
                self.myself.host = link.local_host
                self.dirty = True
            self.sent += 1
            self.outbox.append(SendLink(link, messages.Pong(self._pick_gossip(header.sender))))
            if sender is None and kind is messages.Meet and header.sender not in self.blacklist \
                    and header.sender != self.myself.id and valid_node_id(header.sender) \
                    and valid_address(header.host or getattr(link, "peer_host", b""), header.port) \
                    and sum(1 for n in self.nodes.values() if n.claimed_from) < MAX_CLAIMS:
                sender = self._add_claim(header, link, now)  # (after the PONG: its handshake ends first)
        if sender is None or sender is self.myself or sender.handshake:
            if kind not in _HANDSHAKE_KINDS or (sender is None and via is None):
                self._log_ignored(header, kind, link)
            return False
        sender.leaving = bool(header.flags & messages.H_LEAVING)
        sender.extensions = bool(header.flags & messages.H_EXTENSIONS)
        sender.counts = bool(header.flags & messages.H_COUNTS)
        sender.batches = bool(header.flags & messages.H_BATCHES)
        sender.settings = bool(header.flags & messages.H_SETTINGS)
        if kind is messages.Pong:
            sender.ping_sent = 0
            sender.pong_received = now
            if sender.pfail or sender.fail:
                self._clear_failure(sender)
        elif kind is messages.Meet or kind is messages.Ping:
            sender.ping_received = now  # it talks: the wait for it (FailureDetection._silent_since) starts again
            if not sender.connected:
                sender.ping_sent = 0  # our PING went with our link: no answer is awaited
            if sender.pfail or sender.fail:  # and it is not failed from our side
                self._clear_failure(sender)
        if kind is messages.Fail:
            target = self.nodes.get(msg.node_id)
            if target is not None and target is not self.myself and not target.fail:
                self._flag_failed(target, "as %s says" % sender.id[:8].decode(errors="replace"))
            return True
        if kind in (messages.Meet, messages.Ping, messages.Pong):
            self._process_gossip(sender, msg.gossip, now)
        return True

    def _process_gossip(self, sender, entries, now) -> None:
        for g in entries:
            if g.node_id == self.myself.id:
                continue
            node = self.nodes.get(g.node_id)
            if node is not None:
                if node.handshake:
                    continue
                if g.flags & (messages.G_PFAIL | messages.G_FAIL):
                    node.fail_reports[sender.id] = now
                    if g.flags & messages.G_FAIL and not node.fail and node.pfail:
                        self._fail_on_majority(node, now)
                else:
                    node.fail_reports.pop(sender.id, None)
            elif valid_address(g.host, g.port) and self.blacklist.get(g.node_id, 0) <= now:
                self.meet(g.host, g.port, now)

    # -- periodic work -----------------------------------------------------

    def cron(self, now: int) -> None:
        if self.fresh:
            self._announce_joins()
        self.seeds.cron(self, now)
        timeout = self.node_timeout
        interval = min(1000, timeout // 2 or 1)
        for node in list(self.nodes.values()):
            if node is self.myself:
                continue
            if node.handshake:
                self._expire_handshake(node, now)
                continue
            if node.connected and now - node.last_ping >= interval and node.ping_sent == 0:
                self._send_ping(node, now)
            silent_since = self._silent_since(node)
            if silent_since and not node.pfail and now - silent_since > timeout:
                node.pfail = True
            if node.pfail and not node.fail:
                self._fail_on_majority(node, now)
        if self.blacklist:
            for node_id, until in list(self.blacklist.items()):
                if until <= now:
                    del self.blacklist[node_id]
