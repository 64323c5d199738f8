"""Adding and removing nodes at runtime (the spec's section of that name):
CLUSTER MEET, the handshakes it starts, claims, joins, CLUSTER FORGET and
RESET.  :class:`Handshakes` is a part of
:class:`~disque.core.membership.ClusterView` and works on its state
(``nodes``, ``myself``, ``blacklist``, ``outbox``, ``dirty``).

* ``CLUSTER MEET host port`` adds a *handshake* node under a random
  temporary ID and asks for a link to it.  When the link is up we send MEET;
  the PONG that answers carries the peer's real ID, and the temporary entry
  is renamed (or dropped, if that ID is already known).
* A MEET from an unknown sender is a *claim*: the sender becomes a
  handshake node under the ID it claims, at the address it announces or,
  if it announces none, the peer address of the connection, and we link
  to it.  It joins when the PONG on our link carries the ID it claimed; a
  PONG carrying another ID drops the claim, and so does silence (the
  handshake timeout).  At most ``MAX_CLAIMS`` are in progress at once.  Anyone who reaches the bus port can send a MEET:
  a node becomes a member only by answering on a link of ours, which
  ``cluster-password`` or ``tls-cluster`` authenticate.
* Only well-formed node IDs and addresses join
  (:func:`~disque.core.cluster_node.valid_node_id`,
  :func:`~disque.core.cluster_node.valid_address`): a MEET, a handshake's
  PONG or gossip carrying anything else is not followed, so the node file
  always loads again.
* A message from anyone but a member (unknown, in handshake, claiming our
  own ID) is ignored, but for the MEET, PING and PONG of a handshake, which
  are answered; each kind of message ignored is logged once a minute per
  source address (:class:`~.effects.Notice` keys), and so are MEETs from
  unknown senders.  Joins and forgotten members are logged, each one.
* ``CLUSTER FORGET`` drops a node and ignores gossip about it for 60 s, so
  the rest of the cluster has time to forget it too; the handshakes the
  seeds start (:mod:`~disque.core.seeds`) obey it as gossip's do.
"""

from .cluster_node import ClusterNode, new_node_id, printable, valid_address, valid_node_id
from .effects import Link, Notice, Rekey, Unlink

FORGET_BLACKLIST_MS = 60_000
HANDSHAKE_TIMEOUT_MIN_MS = 1000
# Claims in progress at most: each is a link dialling the address a MEET
# gave, so a stranger's flood of MEETs must not make thousands; past it a
# MEET from an unknown node is ignored (and logged), as gossip will bring
# a real node again.
MAX_CLAIMS = 64


class Handshakes:
    """MEET, FORGET, RESET and the handshakes of the cluster view."""

    __slots__ = ()

    def meet(self, host: bytes, port: int, now: int, explicit: bool = False):
        """CLUSTER MEET (``explicit``), gossip about an unknown node and the
        seeds: start a handshake unless a node, myself included, has that
        address (a claim does not hold the address it announced: whoever
        answers there first is the node).  An operator's MEET also wins
        over a recent FORGET; gossip and the seeds do not.  Returns the
        handshake's temporary ID, or None."""
        for n in self.nodes.values():
            if n.host == host and n.port == port and not n.claimed_from:
                return None
        temp = ClusterNode(new_node_id(), host, port, now)
        temp.handshake = True
        temp.meet = True
        temp.explicit = explicit
        self.nodes[temp.id] = temp
        self.outbox.append(Link(temp.id, host, port))
        return temp.id

    def forget(self, node_id: bytes, now: int) -> bool:
        node = self.nodes.get(node_id)
        if node is None or node is self.myself:
            return False
        self._remove_node(node, "CLUSTER FORGET; gossip about it is ignored for %d s"
                          % (FORGET_BLACKLIST_MS // 1000))
        self.blacklist[node_id] = now + FORGET_BLACKLIST_MS
        return True

    def _remove_node(self, node, why: str = "") -> None:
        """Drop ``node``; a member is logged as forgotten, ``why``."""
        del self.nodes[node.id]
        for other in self.nodes.values():
            other.fail_reports.pop(node.id, None)
        self.outbox.append(Unlink(node.id))
        if not node.handshake:
            self.dirty = True
            self.outbox.append(Notice("Node %s forgotten: %s" % (node.describe(), why)))

    def reset(self, new_id=None) -> None:
        """CLUSTER RESET: forget every peer; HARD also takes a new ID."""
        for n in self.peers():
            self._remove_node(n, "CLUSTER RESET")
        self.blacklist.clear()
        if new_id is not None:
            del self.nodes[self.myself.id]
            self.myself.id = new_id
            self.nodes[new_id] = self.myself
        self.dirty = True

    def _add_claim(self, header, link, now):
        """A MEET from an unknown sender: a handshake under the ID it
        claims, linked to at once (see the module docstring).  Our link
        sends it a PING, as Redis does for the nodes a MEET made: every
        node answers a PING with a PONG, which is all the proof needs; a
        MEET would make the node there take us as a claim in turn, and a
        stranger could then introduce two clusters to each other."""
        source = getattr(link, "peer_host", b"")
        host = header.host or source
        node = ClusterNode(header.sender, host, header.port, now)
        node.handshake = True
        node.claimed_from = source or b"?"
        self.nodes[node.id] = node
        self.outbox.append(Link(node.id, host, header.port))
        self.outbox.append(Notice("Node %s asks to join (MEET from %s): it joins once it answers as itself "
                                  "on a link of ours" % (node.describe(), printable(source)), ("meet", source)))
        return node

    def _complete_handshake(self, pending, header, link):
        """The PONG on our link to the handshake node ``pending`` says who
        is at its address: the node ``header.sender``.  It joins, unless it
        is known already, is myself, was forgotten a moment ago, or is not
        the node a claim named.  Returns the sender's node, or None."""
        if pending.claimed_from:
            if header.sender != pending.id:
                self._remove_node(pending)
                self.outbox.append(Notice(
                    "Node %s asked to join (MEET from %s), but %s:%d answers as %s: not joined"
                    % (pending.describe(), printable(pending.claimed_from), printable(pending.host), pending.port,
                       printable(header.sender[:8])), ("claim", pending.claimed_from)))
                return None
            pending.claimed_from = b""
            return self._joined(pending, header, link)
        old_id = pending.id
        del self.nodes[old_id]
        self.seeds.answered(old_id, header.sender, self.myself.id, self.outbox)
        known = self.nodes.get(header.sender)
        if known is not None and known.claimed_from:  # our link's answer beats a claim
            self._remove_node(known)
            known = None
        if pending.explicit:
            self.blacklist.pop(header.sender, None)
        if known is not None or header.sender == self.myself.id or header.sender in self.blacklist \
                or not valid_node_id(header.sender):
            self.outbox.append(Unlink(old_id))
            return known if known is not self.myself else None
        pending.id = header.sender
        self.nodes[pending.id] = pending
        self.outbox.append(Rekey(old_id, header.sender))
        return self._joined(pending, header, link)

    def _joined(self, node, header, link):
        """``node``, in handshake, answered on our link as itself: a member."""
        node.handshake = False
        node.meet = False
        if header.host and valid_address(header.host, node.port):
            node.host = header.host
        self.dirty = True
        self.fresh.append(node.id)  # announced to the other members at the next cron
        self.outbox.append(Notice("Node %s joined the cluster (it answered on our link to %s)"
                                  % (node.describe(), printable(getattr(link, "peer_host", b"")))))
        return node

    def _expire_handshake(self, node, now) -> None:
        """Drop the handshake ``node`` once it has been silent past the
        handshake timeout (``node_timeout``, at least 1 s)."""
        if now - node.created > max(self.node_timeout, HANDSHAKE_TIMEOUT_MIN_MS):
            self._remove_node(node)
            if node.claimed_from:
                self.outbox.append(Notice(
                    "Node %s asked to join (MEET from %s) and did not answer on a link of ours: not joined"
                    % (node.describe(), printable(node.claimed_from)), ("claim", node.claimed_from)))

    def _log_ignored(self, header, kind, link) -> None:
        """A message not acted on: its sender is not a member."""
        source = getattr(link, "peer_host", b"")
        name = kind.__name__.upper()
        self.outbox.append(Notice("Ignored %s from node %s (from %s): not a member of this cluster"
                                  % (name, printable(header.sender[:8]), printable(source)),
                                  ("ignored", source, name)))
