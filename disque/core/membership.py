"""The node's view of the cluster: membership, gossip, failure detection.

Pure, like the rest of the core: every entry point gets the time, and what
must happen on the network is appended to ``outbox`` as effects
(``Send`` to a node, ``SendLink`` on the connection a request came from,
``Link``/``Unlink``/``Rekey`` to open, close or rename the link to a peer).

Membership ("Adding and removing nodes at runtime"):

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
* PING, PONG and MEET carry gossip about a few known nodes; a node unknown
  to the receiver starts a handshake with it, so meeting one node of a
  cluster is enough and a chain of MEETs becomes a full mesh.
* Members are the known nodes that are not in handshake: only they count
  (``size``, ``reachable``, copies of jobs), are written to the node file,
  and have their messages acted on.  A message from anyone else (unknown,
  in handshake, claiming our own ID) is ignored, but for the MEET, PING and
  PONG of a handshake, which are answered; each kind of message ignored is
  logged once a minute per source address (:class:`~.effects.Notice`
  keys), and so are MEETs from unknown senders.  Joins and forgotten
  members are logged, each one.
* Only well-formed node IDs and addresses join (:func:`valid_node_id`,
  :func:`valid_address`): a MEET, a handshake's PONG or gossip carrying
  anything else is not followed, so the node file always loads again.
* ``CLUSTER FORGET`` drops a node and ignores gossip about it for 60 s, so
  the rest of the cluster has time to forget it too.

Failure detection: every peer is pinged at least every
``min(1 s, node_timeout / 2)``.  A peer is suspected (PFAIL) once we have
waited ``node_timeout`` to hear from it (:meth:`ClusterView._silent_since`):
while our link to it is up, for the PONG to our oldest unanswered PING;
while it is down, for any word of it (PONG, PING or MEET) since its last
one, or since a PING of ours still unanswered if that came later.  A PFAIL
node that a majority of the cluster also reports as PFAIL or FAIL (reports
are gossip, valid for ``2 * node_timeout``) becomes FAIL, broadcast to
every node.  Failure detection only steers replication and what HELLO
tells clients (nothing is failed over), so both flags clear as soon as the
peer talks:

* a PONG to our PING (the original's only way back; its cron reconnects a
  lost link every 100 ms to ask, and so do our links, see
  :mod:`disque.bus.links`);
* a PING or MEET it sends us, such as the first message of a restarted
  node on the link it opens at start-up.  While our own link is down it
  also starts the wait again (a PING pending on a lost link is not waited
  for any more): a peer that came back counts as reachable for
  ``node_timeout`` from its last word, as after a PONG, and is not flagged
  again by the next cron, so an ADDJOB asking it for a copy meanwhile
  waits for the copy instead of answering NOREPL.

``size`` counts known nodes including myself, handshakes excluded (the
original's ``cluster_size``); ``reachable`` counts peers neither in
handshake nor suspected nor failed (``reachable_nodes_count``, myself
excluded).
"""

import os
import random as _random

from . import messages
from .effects import Link, Notice, Rekey, Send, SendLink, Unlink

FORGET_BLACKLIST_MS = 60_000
HANDSHAKE_TIMEOUT_MIN_MS = 1000
# Claims in progress at most: each is a link dialling the address a MEET
# gave, so a stranger's flood of MEETs must not make thousands; past it a
# MEET from an unknown node is ignored (and logged), as gossip will bring
# a real node again.
MAX_CLAIMS = 64
# What a node in handshake sends (answered, but not acted on).
_HANDSHAKE = (messages.Meet, messages.Ping, messages.Pong)
_HEX_DIGITS = frozenset(b"0123456789abcdef")
_MAX_PORT = 65535 - 10000  # its bus port (+10000) must exist


def new_node_id() -> bytes:
    return os.urandom(20).hex().encode()


def valid_node_id(node_id: bytes) -> bool:
    """40 lowercase hex digits: what :func:`new_node_id` makes and the node
    file accepts."""
    return len(node_id) == 40 and _HEX_DIGITS.issuperset(node_id)


def _text(data: bytes) -> str:
    """Bytes a peer sent, for the log: printable ASCII, the rest escaped."""
    return repr(bytes(data))[2:-1] if data else "?"


def valid_address(host: bytes, port: int) -> bool:
    """A peer address the node can link to and write in its node file:
    a non-empty host of printable ASCII without spaces (an IPv6 address or
    DNS labels of 1 to 63 bytes), a port whose bus port exists.  The bus carries any bytes; membership takes only these."""
    if not (0 < port <= _MAX_PORT and 0 < len(host) <= 255 and all(33 <= c <= 126 for c in host)):
        return False
    return b":" in host or all(0 < len(label) <= 63 for label in host.split(b"."))  # IPv6, or DNS labels


class ClusterNode:
    __slots__ = ("id", "host", "port", "handshake", "pfail", "fail", "leaving", "ping_sent",
                 "pong_received", "ping_received", "last_ping", "fail_reports", "connected", "created", "meet",
                 "explicit", "claimed_from", "extensions")

    def __init__(self, node_id: bytes, host: bytes = b"", port: int = 0, now: int = 0):
        self.id = node_id
        self.host = host
        self.port = port
        self.handshake = False
        self.meet = False  # send MEET (not PING) when the link comes up
        self.explicit = False  # a handshake an operator asked for (CLUSTER MEET)
        # A claim (a handshake under the ID its own MEET gave): the address
        # that MEET came from; b"" for every other node.
        self.claimed_from = b""
        self.pfail = False
        self.fail = False
        self.leaving = False
        self.ping_sent = 0  # ms of the oldest unanswered PING, 0 = none
        self.pong_received = 0  # ms of its last PONG
        self.ping_received = 0  # ms of its last PING or MEET (it talks to us on its own link)
        self.last_ping = 0
        self.fail_reports = {}  # reporter id -> ms of the report
        self.connected = False  # our outbound link is up (set by the adapter)
        self.created = now
        # The peer said it reads bus version 3 (H_EXTENSIONS): it gets job
        # records with their options; a peer of the previous version gets
        # version 2 frames, which it reads (a rolling upgrade).
        self.extensions = False

    @property
    def reachable(self) -> bool:
        return not (self.handshake or self.pfail or self.fail)

    def describe(self) -> str:
        """``<ID prefix> (<host>:<port>)``, for the log."""
        return "%s (%s:%d)" % (self.id[:8].decode(errors="replace"), self.host.decode(errors="replace"), self.port)

    def flag_names(self):
        names = []
        if self.leaving:
            names.append(b"leaving")
        if self.handshake:
            names.append(b"handshake")
        if self.fail:
            names.append(b"fail")
        elif self.pfail:
            names.append(b"fail?")
        return names


class ClusterView:
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
        return sum(1 for n in nodes.values() if not n.handshake)

    @property
    def reachable(self) -> int:
        """Reachable peers, myself excluded."""
        me = self.myself
        return sum(1 for n in self.nodes.values() if n is not me and n.reachable)

    @property
    def leaving_peers(self) -> int:
        """Reachable peers that are leaving (no new copies go to them)."""
        me = self.myself
        return sum(1 for n in self.nodes.values() if n is not me and n.leaving and n.reachable)

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
                               (messages.H_LEAVING if self.leaving else 0) | messages.H_EXTENSIONS)

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

    def _gossip(self, exclude: bytes):
        """A few random known nodes (at least 3, or a tenth of the cluster)."""
        candidates = [n for n in self.nodes.values() if not n.handshake and n.id != exclude]
        k = min(len(candidates), max(3, len(self.nodes) // 10))
        picked = self.rng.sample(candidates, k) if k < len(candidates) else candidates
        out = []
        for n in picked:
            flags = (messages.G_PFAIL if n.pfail else 0) | (messages.G_FAIL if n.fail else 0) | \
                    (messages.G_LEAVING if (n.leaving or (n is self.myself and self.leaving)) else 0)
            out.append(messages.Gossip(n.id, n.host, n.port, flags))
        return tuple(out)

    def _ping(self, node, now, kind=messages.Ping) -> None:
        if node.ping_sent == 0:
            node.ping_sent = now
        node.last_ping = now
        self.send(node.id, kind(self._gossip(node.id)))

    # -- commands ----------------------------------------------------------

    def meet(self, host: bytes, port: int, now: int, explicit: bool = False) -> None:
        """CLUSTER MEET (``explicit``) and gossip about an unknown node:
        start a handshake unless a node, myself included, has that address
        (a claim does not hold the address it announced: whoever answers
        there first is the node).  An operator's MEET also wins over a
        recent FORGET; gossip does not."""
        for n in self.nodes.values():
            if n.host == host and n.port == port and not n.claimed_from:
                return
        temp = ClusterNode(new_node_id(), host, port, now)
        temp.handshake = True
        temp.meet = True
        temp.explicit = explicit
        self.nodes[temp.id] = temp
        self.outbox.append(Link(temp.id, host, port))

    def forget(self, node_id: bytes, now: int) -> bool:
        node = self.nodes.get(node_id)
        if node is None or node is self.myself:
            return False
        self._remove(node, "CLUSTER FORGET; gossip about it is ignored for %d s" % (FORGET_BLACKLIST_MS // 1000))
        self.blacklist[node_id] = now + FORGET_BLACKLIST_MS
        return True

    def _remove(self, node, why: str = "") -> None:
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
            self._remove(n, "CLUSTER RESET")
        self.blacklist.clear()
        if new_id is not None:
            del self.nodes[self.myself.id]
            self.myself.id = new_id
            self.nodes[new_id] = self.myself
        self.dirty = True

    def restore(self, leaving: bool, peers, now: int) -> None:
        """Peers from the node file: known (no handshake), linked at once,
        suspected only if they stay silent for ``node_timeout``."""
        self.leaving = self.myself.leaving = leaving
        for node_id, host, port, peer_leaving in peers:
            if node_id in self.nodes:
                continue
            node = ClusterNode(node_id, host, port, now)
            node.leaving = peer_leaving
            self.nodes[node_id] = node
            self.outbox.append(Link(node_id, host, port))

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
        self._ping(node, now, messages.Meet if node.meet else messages.Ping)

    def link_down(self, node_id: bytes) -> None:
        node = self.nodes.get(node_id)
        if node is not None:
            node.connected = False

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
            self.outbox.append(SendLink(link, messages.Pong(self._gossip(header.sender))))
            if sender is None and kind is messages.Meet and header.sender not in self.blacklist \
                    and header.sender != self.myself.id and valid_node_id(header.sender) \
                    and valid_address(header.host or getattr(link, "peer_host", b""), header.port) \
                    and sum(1 for n in self.nodes.values() if n.claimed_from) < MAX_CLAIMS:
                sender = self._add_claim(header, link, now)  # (after the PONG: its handshake ends first)
        if sender is None or sender is self.myself or sender.handshake:
            if kind not in _HANDSHAKE or (sender is None and via is None):
                self._ignored(header, kind, link)
            return False
        sender.leaving = bool(header.flags & messages.H_LEAVING)
        sender.extensions = bool(header.flags & messages.H_EXTENSIONS)
        if kind is messages.Pong:
            sender.ping_sent = 0
            sender.pong_received = now
            if sender.pfail or sender.fail:
                self._clear_failure(sender)
        elif kind is messages.Meet or kind is messages.Ping:
            sender.ping_received = now  # it talks: the wait for it (_silent_since) starts again
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
                                  "on a link of ours" % (node.describe(), _text(source)), ("meet", source)))
        return node

    def _complete_handshake(self, pending, header, link):
        """The PONG on our link to the handshake node ``pending`` says who
        is at its address: the node ``header.sender``.  It joins, unless it
        is known already, is myself, was forgotten a moment ago, or is not
        the node a claim named.  Returns the sender's node, or None."""
        if pending.claimed_from:
            if header.sender != pending.id:
                self._remove(pending)
                self.outbox.append(Notice(
                    "Node %s asked to join (MEET from %s), but %s:%d answers as %s: not joined"
                    % (pending.describe(), _text(pending.claimed_from), _text(pending.host), pending.port,
                       _text(header.sender[:8])), ("claim", pending.claimed_from)))
                return None
            pending.claimed_from = b""
            return self._joined(pending, header, link)
        old_id = pending.id
        del self.nodes[old_id]
        known = self.nodes.get(header.sender)
        if known is not None and known.claimed_from:  # our link's answer beats a claim
            self._remove(known)
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
        self.outbox.append(Notice("Node %s joined the cluster (it answered on our link to %s)"
                                  % (node.describe(), _text(getattr(link, "peer_host", b"")))))
        return node

    def _ignored(self, header, kind, link) -> None:
        """A message not acted on: its sender is not a member."""
        source = getattr(link, "peer_host", b"")
        name = kind.__name__.upper()
        self.outbox.append(Notice("Ignored %s from node %s (from %s): not a member of this cluster"
                                  % (name, _text(header.sender[:8]), _text(source)), ("ignored", source, name)))

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
                        self._maybe_fail(node, now)
                else:
                    node.fail_reports.pop(sender.id, None)
            elif valid_address(g.host, g.port) and self.blacklist.get(g.node_id, 0) <= now:
                self.meet(g.host, g.port, now)

    def _maybe_fail(self, node, now) -> None:
        valid = now - 2 * self.node_timeout
        reports = sum(1 for t in node.fail_reports.values() if t >= valid)
        if reports + 1 >= self.size // 2 + 1:
            self._flag_failed(node, "by %d of %d nodes" % (reports + 1, self.size))
            self.broadcast(messages.Fail(node.id))

    def _flag_failed(self, node, why: str) -> None:
        node.fail = True
        node.pfail = True
        self.outbox.append(Notice("Node %s flagged as failing, %s" % (node.describe(), why)))

    def _clear_failure(self, node) -> None:
        if node.fail:
            self.outbox.append(Notice("Node %s is reachable again: no longer failing" % node.describe()))
        node.pfail = node.fail = False

    # -- periodic work -----------------------------------------------------

    @staticmethod
    def _silent_since(node) -> int:
        """Since when we have been waiting to hear from ``node`` (ms; it is
        suspected ``node_timeout`` later), 0 if we are not waiting.  With
        our link up: since our oldest unanswered PING, if one is pending.
        With it down: since the latest of its last PONG, its last PING or
        MEET and a PING of ours still unanswered, or else since we learnt
        of it."""
        if node.connected:
            return node.ping_sent
        return max(node.ping_sent, node.pong_received, node.ping_received) or node.created

    def cron(self, now: int) -> None:
        timeout = self.node_timeout
        interval = min(1000, timeout // 2 or 1)
        for node in list(self.nodes.values()):
            if node is self.myself:
                continue
            if node.handshake:
                if now - node.created > max(timeout, HANDSHAKE_TIMEOUT_MIN_MS):
                    self._remove(node)
                    if node.claimed_from:
                        self.outbox.append(Notice(
                            "Node %s asked to join (MEET from %s) and did not answer on a link of ours: not joined"
                            % (node.describe(), _text(node.claimed_from)), ("claim", node.claimed_from)))
                continue
            if node.connected and now - node.last_ping >= interval and node.ping_sent == 0:
                self._ping(node, now)
            silent_since = self._silent_since(node)
            if silent_since and not node.pfail and now - silent_since > timeout:
                node.pfail = True
            if node.pfail and not node.fail:
                self._maybe_fail(node, now)
        if self.blacklist:
            for node_id, until in list(self.blacklist.items()):
                if until <= now:
                    del self.blacklist[node_id]

    # -- the node file -----------------------------------------------------

    def nodes_file_text(self) -> bytes:
        lines = [b"# disque cluster nodes file: written by the node, do not edit while it runs"]
        for n in [*self.peers(), self.myself]:
            if n.handshake:
                continue
            flags = []
            if n is self.myself:
                flags.append(b"myself")
            if n.leaving or (n is self.myself and self.leaving):
                flags.append(b"leaving")
            lines.append(b"%s %s:%d %s" % (n.id, n.host, n.port, b",".join(flags) or b"noflags"))
        return b"\n".join(lines) + b"\n"


def parse_nodes_file(text: bytes):
    """``(my_id, leaving, [(id, host, port, leaving), ...])`` from a node
    file; raises ValueError with a line number on anything malformed."""
    my_id = None
    leaving = False
    peers = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(b"#"):
            continue
        parts = line.split()
        if len(parts) != 3:
            raise ValueError("line %d: expected '<id> <host>:<port> <flags>'" % lineno)
        node_id, addr, flags = parts
        if len(node_id) != 40 or any(c not in b"0123456789abcdef" for c in node_id):
            raise ValueError("line %d: bad node ID" % lineno)
        host, sep, port = addr.rpartition(b":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536 - 10000:
            raise ValueError("line %d: bad address" % lineno)
        names = set(flags.split(b","))
        if not names <= {b"myself", b"leaving", b"noflags"}:
            raise ValueError("line %d: unknown flags" % lineno)
        if b"myself" in names:
            if my_id is not None:
                raise ValueError("line %d: a second 'myself'" % lineno)
            my_id = node_id
            leaving = b"leaving" in names
        else:
            peers.append((node_id, host, int(port), b"leaving" in names))
    if my_id is None:
        raise ValueError("no 'myself' line")
    return my_id, leaving, peers
