"""Cluster seeds (``cluster-seeds``): the nodes a node joins by itself.

:class:`Seeds` is held by :class:`~disque.core.membership.ClusterView`
(``cluster.seeds``) and run by its cron (every 100 ms); like the rest of
the core it reads no clock and starts nothing itself: it asks the view for
a handshake (``meet``) or a MEET on a link, and says what an operator
should read as ``Notice`` effects.

The rules:

* A seed is a client address (``host``, ``port``), as CLUSTER MEET takes:
  the bus is at port + 10000.
* While the seeds are *active* (from start-up, or from a CONFIG SET of
  ``cluster-seeds``), each seed not joined yet is tried at once, then
  again after 1 s, 2 s, 4 s ... at most every 30 s (``FIRST_RETRY_MS``,
  ``MAX_RETRY_MS``).  A try is what the state of the seed calls for:

  - nothing known at its address: a handshake with it (``meet``, as gossip
    starts one: a recent CLUSTER FORGET holds, see below);
  - a handshake or a claim at its address: nothing, it is in progress;
  - a member at its address whose link is up but that has not sent us a
    PING or MEET since start-up (so it does not take us for a member: it
    forgot us, or we restarted after it did): a MEET on our link, which
    makes it take us for a claim and link back to prove us;
  - a member whose link is down: nothing (the link reconnects every 100 ms
    by itself).

* A seed is *joined* when a member of ours at its address (or the node that
  answered the handshake made for it) has sent us a PING or MEET since
  start-up: it has us in its table.  Once one seed is joined the seeds are
  done: gossip completes the mesh, and nothing is tried again until a
  restart or a CONFIG SET of ``cluster-seeds``.  So a node that an operator
  removes from the cluster (CLUSTER FORGET) is not brought back by the
  seeds of a node that runs on; a node that restarts tries again.
* A seed that is this node is skipped: its address is the node's
  (``myself``'s advertised host, or one of ``view.own_hosts``, with the
  node's port), or the handshake made for it was answered by this node's
  own ID (another name or address of the node).
* The closed bus holds (``docs/security.md``): a seed becomes a member only
  by the handshake rules of :mod:`~disque.core.handshake`, proven on our
  own link, under ``cluster-password`` or ``tls-cluster`` alike; and the
  handshakes the seeds start do not override a CLUSTER FORGET: a node
  forgotten less than 60 s ago is dropped when it answers, as gossip about
  it is.
* A seed not joined is logged at each try after the first, once a minute
  per seed at most (the ``Notice`` key ``("seed", host, port)``).
"""

from .cluster_node import printable
from .effects import Notice

FIRST_RETRY_MS = 1000
MAX_RETRY_MS = 30_000


class Seed:
    """One seed and where the node stands with it."""

    __slots__ = ("host", "port", "due", "delay", "tries", "handshake", "node_id", "is_self")

    def __init__(self, host: bytes, port: int, now: int):
        self.host = host
        self.port = port
        self.due = now  # ms of its next try
        self.delay = FIRST_RETRY_MS  # before the try after the next one
        self.tries = 0
        self.handshake = None  # the temporary ID of the handshake made for it
        self.node_id = None  # the ID that answered that handshake
        self.is_self = False

    def __str__(self):
        host = printable(self.host)
        return "%s:%d" % ("[%s]" % host if ":" in host else host, self.port)


class Seeds:
    """The seeds of one node and the loop that joins them (see the module
    docstring)."""

    def __init__(self):
        self.seeds = []
        self.active = False

    def configure(self, addresses, now: int) -> None:
        """``addresses``: ``(host, port)`` pairs (hosts as bytes, IP
        addresses in their normal form); every one is due at once and the
        loop is active again, as at start-up."""
        self.seeds = [Seed(host, port, now) for host, port in addresses]
        self.active = bool(self.seeds)

    def joined_through(self, view):
        """The first seed through which the node is in the cluster, or None."""
        for seed in self.seeds:
            node = None if seed.is_self else self.member_for(view, seed)
            if node is not None and node.ping_received:
                return seed
        return None

    def member_for(self, view, seed):
        """The member of ``view`` that is ``seed``: the node that answered
        its handshake, or a member at its address; None if none is."""
        if seed.node_id is not None:
            node = view.nodes.get(seed.node_id)
            if node is not None and not node.handshake and node is not view.myself:
                return node
        for node in view.nodes.values():
            if node.host == seed.host and node.port == seed.port and not node.handshake \
                    and node is not view.myself:
                return node
        return None

    def answered(self, temp_id: bytes, node_id: bytes, my_id: bytes, outbox) -> None:
        """A handshake (``temp_id``) was answered as ``node_id``: if it was
        a seed's, that seed is that node, or this node itself."""
        for seed in self.seeds:
            if seed.handshake == temp_id:
                seed.handshake = None
                if node_id == my_id:
                    self._skip(seed, "it answers as this node", outbox)
                else:
                    seed.node_id = node_id

    def cron(self, view, now: int) -> None:
        """Every cluster cron: try the seeds that are due, or stop once one
        is joined."""
        if not self.active:
            return
        seed = self.joined_through(view)
        if seed is not None:
            self.active = False
            node = self.member_for(view, seed)
            view.outbox.append(Notice("In the cluster through seed %s (node %s): the seeds are not tried again "
                                      "until a restart or CONFIG SET cluster-seeds" % (seed, printable(node.id[:8]))))
            return
        for seed in self.seeds:
            if seed.is_self or now < seed.due:
                continue
            if self._is_me(view, seed):
                self._skip(seed, "it is an address of this node", view.outbox)
                continue
            self._try(view, seed, now)
            seed.due = now + seed.delay
            seed.delay = min(seed.delay * 2, MAX_RETRY_MS)
        if all(s.is_self for s in self.seeds):
            self.active = False

    # -- one try --------------------------------------------------------

    @staticmethod
    def _is_me(view, seed) -> bool:
        me = view.myself
        return seed.port == me.port and (seed.host == me.host or seed.host in view.own_hosts)

    @staticmethod
    def _skip(seed, why, outbox) -> None:
        seed.is_self = True
        outbox.append(Notice("Seed %s skipped: %s" % (seed, why)))

    def _try(self, view, seed, now: int) -> None:
        node = self.member_for(view, seed)
        if node is not None:
            if node.connected:
                view.send_meet(node, now)
                why = "node %s answers on our link but does not take this node as a member (a CLUSTER FORGET " \
                      "keeps a node out for 60 s); MEET sent again" % node.describe()
            else:
                why = "our link to node %s is down" % node.describe()
        elif self._in_progress(view, seed):
            why = "no answer on its bus port %d" % (seed.port + 10000)
        else:
            seed.handshake = view.meet(seed.host, seed.port, now)
            why = "no answer on its bus port %d" % (seed.port + 10000)
        seed.tries += 1
        if seed.tries > 1:
            view.outbox.append(Notice("Seed %s not joined yet: %s (%d tries); next try in %d s"
                                      % (seed, why, seed.tries, seed.delay // 1000), ("seed", seed.host, seed.port)))

    @staticmethod
    def _in_progress(view, seed) -> bool:
        """A handshake (ours) or a claim (its MEET) at the seed's address."""
        if seed.handshake is not None and seed.handshake in view.nodes:
            return True
        return any(n.handshake and n.host == seed.host and n.port == seed.port for n in view.nodes.values())
