"""SimCluster: pure cores wired together in memory, with one integer clock
and no reactor.

:class:`SimCluster` wires several pure :class:`~disque.core.node.NodeState`
cores together in memory: ``Send`` /
``SendLink`` effects become deliveries through a FIFO, ``Link`` effects
become simulated links (up at once if a node listens at that address), and
partitions or dead nodes drop traffic.  Deterministic for a given seed, and
thousands of times faster than sockets, so the state machine can be tested
message by message.

    sim = SimCluster(3)
    sim.chain_meet()           # node i meets node i+1
    sim.settle()               # deliver and tick until the mesh is complete
    assert all(n.cluster.reachable == 2 for n in sim.nodes)
"""

import random
from collections import deque

from ..core import effects
from ..core.node import NodeState
from ..core.node_file_format import parse_nodes_file


HOST = b"127.0.0.1"
BASE_PORT = 7000


class SimLink:
    """One end of a simulated bus connection."""

    __slots__ = ("owner", "node_id", "peer_host", "local_host", "other", "up")

    def __init__(self, owner, node_id, peer_host):
        self.owner = owner  # index of the node holding this end
        self.node_id = node_id  # for an outbound link: the id the owner uses for the peer
        self.peer_host = peer_host
        self.local_host = HOST
        self.other = None
        self.up = True


class SimCluster:
    """Pure cores (``NodeState``) wired together in memory: one integer
    clock (ms), FIFO delivery of bus messages, partitions (``cut`` /
    ``heal``), kills and revivals.  No protocol, no bytes: messages go
    from one core's outbox to the other's ``bus_receive`` as records, so
    every message of the state machine can be tested deterministically.
    Node ``i`` runs a method with :meth:`call`; :attr:`notices` collects
    the operators' log lines."""

    def __init__(self, n, seed=0, now=1_795_347_500_000, node_timeout=15000, policy=None):
        self.rng = random.Random(seed)
        if policy is None:
            from ..federation.default import DefaultPolicy as policy
        self.policy_factory = policy  # called once per node
        self.now = now
        self.nodes = []
        self.ports = []
        self.alive = []
        self.outbound = []  # per node: {node_id: SimLink}
        self.queue = deque()  # (receiver index, header, msg, link)
        self.cut = set()  # frozenset({i, j}) pairs that cannot talk
        self.delivered = []  # (sender index, receiver index, msg) log
        self.replies = []  # (node index, client handle, payload) of Reply effects
        self.notices = []  # (node index, text) of Notice effects: what the node would log
        for i in range(n):
            self.add_node(node_timeout)

    # -- topology --------------------------------------------------------

    def add_node(self, node_timeout=15000):
        """One more node (not met yet); returns its index."""
        i = len(self.nodes)
        node_id = bytes(self.rng.getrandbits(8) for _ in range(20)).hex().encode()
        node = NodeState(node_id, self.now, rng=random.Random(self.rng.random()), port=BASE_PORT + i)
        node.cluster.node_timeout = node_timeout
        node.federation.policy = self.policy_factory()
        self.nodes.append(node)
        self.ports.append(BASE_PORT + i)
        self.alive.append(True)
        self.outbound.append({})
        return node

    def index_of(self, node_id):
        """The index of the node with ID ``node_id``."""
        for i, n in enumerate(self.nodes):
            if n.my_id == node_id:
                return i
        return None

    def partition(self, *groups):
        """Only nodes of the same group can talk (indexes)."""
        self.cut = set()
        for a in range(len(self.nodes)):
            for b in range(len(self.nodes)):
                if a != b and not any(a in g and b in g for g in groups):
                    self.cut.add(frozenset((a, b)))

    def heal(self):
        """Every cut link delivers again."""
        self.cut = set()

    def kill(self, i):
        """Node ``i`` stops: nothing reaches it or leaves it (its state stays
        for :meth:`revive`)."""
        self.alive[i] = False
        for j, links in enumerate(self.outbound):
            for link in links.values():
                if link.other is not None and link.other.owner == i:
                    self._link_down(j, link)
        self.outbound[i].clear()

    def revive(self, i):
        """Node ``i`` comes back with its state (as after a restart that
        reloaded its node file): links to every known peer again."""
        self.alive[i] = True
        node = self.nodes[i]
        for peer in node.cluster.peers():
            node.outbox.append(effects.Link(peer.id, peer.host, peer.port))
        self._drain(i)
        self.pump()

    def restart(self, i, node_file=True):
        """Node ``i`` restarts: a new core on its port, with the ID and the
        peers of its node file, or without the file (lost: a new ID, no
        peers).  What the core learns from its config (the seeds) is the
        caller's to give again, as the runtime does at start-up.  Returns
        the new core."""
        old = self.nodes[i]
        text = old.cluster.nodes_file_text()
        self.kill(i)
        if node_file:
            node_id, leaving, peers = parse_nodes_file(text)
        else:
            node_id, leaving, peers = bytes(self.rng.getrandbits(8) for _ in range(20)).hex().encode(), False, []
        node = NodeState(node_id, self.now, rng=random.Random(self.rng.random()), port=self.ports[i])
        node.cluster.node_timeout = old.cluster.node_timeout
        node.federation.policy = self.policy_factory()
        node.set_time(self.now)
        node.cluster.restore(leaving, peers, self.now)
        self.nodes[i] = node
        self.alive[i] = True
        self._drain(i)
        self.pump()
        return node

    def _can_talk(self, a, b):
        return self.alive[a] and self.alive[b] and frozenset((a, b)) not in self.cut

    # -- driving ---------------------------------------------------------

    def chain_meet(self):
        """CLUSTER MEET from each node to the next: gossip makes a full mesh."""
        for i in range(len(self.nodes) - 1):
            self.call(i, "cluster.meet", HOST, self.ports[i + 1], self.now, True)

    def call(self, i, method, *args):
        """Node ``i`` runs ``method`` (a dotted path from the node, such as
        ``"acks.ack_jobs"``) at the cluster's time; then its effects are
        executed and the messages delivered."""
        node = self.nodes[i]
        node.set_time(self.now)
        target = node
        for name in method.split("."):
            target = getattr(target, name)
        result = target(*args)
        self._drain(i)
        self.pump()
        return result

    def pump(self, limit=1_000_000):
        """Deliver queued messages (and what they cause) until none is left."""
        n = 0
        while self.queue and n < limit:
            n += 1
            sender, receiver, header, msg, link = self.queue.popleft()
            if not self._can_talk(sender, receiver):
                continue
            node = self.nodes[receiver]
            node.set_time(self.now)
            self.delivered.append((sender, receiver, msg))
            node.bus_receive(header, msg, link)
            self._drain(receiver)
        return n

    def advance(self, ms, step=100):
        """Move the clock ``ms`` forward, ticking every node each ``step``."""
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + step)
            self._retry_links()
            for i, node in enumerate(self.nodes):
                if self.alive[i]:
                    node.set_time(self.now)
                    node.tick()
                    self._drain(i)
                    self.pump()  # a LAN: messages land before the next node's timers

    def settle(self, ms=3000):
        """Let ``ms`` of cluster time pass, ticking every node and delivering
        every message."""
        self.pump()
        self.advance(ms)

    # -- effects ---------------------------------------------------------

    def _drain(self, i):
        node = self.nodes[i]
        batch = node.outbox[:]
        node.outbox.clear()
        effects.execute(batch, _NodeEffects(self, i))

    def _connect(self, i, link, host, port):
        if port not in self.ports:
            return
        j = self.ports.index(port)
        if host != HOST or not self._can_talk(i, j):
            return
        link.up = True
        inbound = SimLink(j, None, HOST)
        link.other, inbound.other = inbound, link
        node = self.nodes[i]
        node.set_time(self.now)
        node.link_up(link.node_id)
        self._drain(i)

    def _link_down(self, i, link):
        link.up = False
        link.other = None
        node = self.nodes[i]
        node.set_time(self.now)
        node.link_down(link.node_id)
        self._drain(i)

    def _retry_links(self):
        for i, links in enumerate(self.outbound):
            if not self.alive[i]:
                continue
            for link in list(links.values()):
                if link.up and link.other is not None and not self._can_talk(i, link.other.owner):
                    self._link_down(i, link)
                elif not link.up:
                    node = self.nodes[i]
                    peer = node.cluster.nodes.get(link.node_id)
                    if peer is not None:
                        self._connect(i, link, peer.host, peer.port)


class _NodeEffects:
    """Executes the effects of node ``i`` inside a SimCluster (the same
    dispatch as the real runtime: :func:`disque.core.effects.execute`).
    Persist effects are ignored: a simulated node has no disk."""

    __slots__ = ("sim", "i")

    def __init__(self, sim, i):
        self.sim = sim
        self.i = i

    def on_send(self, e):
        sim, i = self.sim, self.i
        link = sim.outbound[i].get(e.node_id)
        if link is not None and link.up and link.other is not None:
            sim.queue.append((i, link.other.owner, sim.nodes[i].cluster.header(), e.message, link.other))

    def on_send_link(self, e):
        sim, i = self.sim, self.i
        other = e.link.other
        if other is not None and e.link.up:
            sim.queue.append((i, other.owner, sim.nodes[i].cluster.header(), e.message, other))

    def on_link(self, e):
        sim, i = self.sim, self.i
        link = sim.outbound[i][e.node_id] = SimLink(i, e.node_id, e.host)
        link.up = False
        link.other = None
        sim._connect(i, link, e.host, e.port)

    def on_unlink(self, e):
        self.sim.outbound[self.i].pop(e.node_id, None)

    def on_rekey(self, e):
        links = self.sim.outbound[self.i]
        link = links.pop(e.old, None)
        if link is not None:
            link.node_id = e.new
            links[e.new] = link

    def on_reply(self, e):
        self.sim.replies.append((self.i, e.client, e.payload))

    def on_persist(self, e):
        pass

    def on_notice(self, e):
        self.sim.notices.append((self.i, e.text))
