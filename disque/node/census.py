"""The cluster view's counts: this node asks its peers for theirs over the
cluster bus, and answers theirs (docs/observability.md, "The cluster
view").

A dashboard's ``/api/cluster`` (disque.http.cluster) calls
:meth:`Census.gather`: a COUNTSASK goes to every peer whose bus link is up
and that reads bus version 4 (``H_COUNTS``), carrying the asking user's
queue patterns, the name filter and a limit; each peer answers COUNTS
from what it holds (:func:`disque.commands.views.queue_census`), among the
queues that user may touch.  The answers are gathered for at most
``timeout`` seconds; a peer that was not asked or did not answer in time
is reported with the reason, never left out in silence:

* ``unreachable``: no bus link to it (down, partitioned, not met yet);
* ``old-version``: it runs a version that does not read COUNTSASK;
* ``timeout``: asked, no answer in time.

No credential leaves the node: peers are the cluster's members, which the
bus already authenticates (``cluster-password``, ``tls-cluster``) and
which already receive every job's body through replication and
federation; a count tells them nothing more.  Answering is on whatever the
node's HTTP side: a node without one is counted too.

Invariant: a COUNTSASK is only ever sent to a peer that announced
``H_COUNTS``, and answering changes no state.
"""

import re

from twisted.internet import defer

from ..bus import wire
from ..commands import views
from ..config.glob import stringmatch
from ..core import messages
from ..http import http_url
from .listeners import WILDCARD_HOSTS

#: How long (seconds) :meth:`Census.gather` waits for the peers' answers.
TIMEOUT = 1.0

OK = "ok"
UNREACHABLE = "unreachable"
OLD_VERSION = "old-version"
TIMED_OUT = "timeout"
_HOST = re.compile(r"\A[A-Za-z0-9.:-]{1,253}\Z")  # a host name, an IPv4 or IPv6 address


def _matcher(patterns):
    return lambda name: any(stringmatch(p, name) for p in patterns)


def dashboard_url(counts, peer_host: bytes):
    """Where a peer's dashboard is, from its COUNTS answer: its
    ``http-bind`` address, or the address the cluster knows the peer by
    when it binds every address; None when it has no HTTP side, or when
    the address is not a host name or an IP address (a link is only ever
    ``http(s)://host:port/``)."""
    if not counts.http_port:
        return None
    host = counts.http_bind.decode("ascii", "replace")
    if host in WILDCARD_HOSTS:
        host = peer_host.decode("ascii", "replace")
    if not _HOST.match(host):
        return None
    return http_url(host, counts.http_port, counts.http_tls)


class Peer:
    """One peer's part of a gathering: ``answer`` (OK, UNREACHABLE,
    OLD_VERSION or TIMED_OUT), its COUNTS when it answered (else None) and
    its dashboard's address when known."""

    __slots__ = ("id", "answer", "counts", "dashboard", "_host")

    def __init__(self, node_id: bytes, answer: str, host: bytes):
        self.id = node_id
        self.answer = answer
        self.counts = None
        self.dashboard = None
        self._host = host

    def answered(self, counts) -> None:
        self.answer = OK
        self.counts = counts
        self.dashboard = dashboard_url(counts, self._host)


class Census:
    """The cluster view's bus side of one :class:`disque.node.runtime.NodeRuntime`."""

    def __init__(self, runtime):
        self.runtime = runtime
        self.node = runtime.node
        self._token = 0
        self._pending = {}  # token -> {node ID: Peer} of a gathering still waiting
        self.node.handle(messages.CountsAsk, self.on_ask)
        self.node.handle(messages.Counts, self.on_counts)

    # -- this node's counts ---------------------------------------------------------

    def counts(self, token: int, visible, wanted: bytes, limit: int) -> messages.Counts:
        """This node's COUNTS: the queues ``visible`` lets through (None:
        all) holding ``wanted``, the ``limit`` longest."""
        config = self.runtime.config
        jobs, queued, total, matching, rows = views.queue_census(self.runtime.ctx, visible, wanted, limit)
        return messages.Counts(token, jobs, queued, total, matching, tuple(messages.QueueCount(*r) for r in rows),
                               config["http-port"], config["http-tls"], config["http-bind"].encode())

    def on_ask(self, sender: bytes, msg) -> None:
        visible = None if msg.all_queues else _matcher(msg.patterns)
        self.node.cluster.send(sender, self.counts(msg.token, visible, msg.wanted, min(msg.limit, wire.MAX_COUNTS)))

    # -- the peers' ----------------------------------------------------------------

    def on_counts(self, sender: bytes, msg) -> None:
        waiting = self._pending.get(msg.token)
        peer = waiting.get(sender) if waiting is not None else None
        if peer is None or peer.answer != TIMED_OUT:
            return  # late, unasked or twice: ignored
        peer.answered(msg)
        if all(p.answer != TIMED_OUT for p in waiting.values()):
            done = self._pending.pop(msg.token)
            self.runtime.reactor.callLater(0, done.fire)

    def gather(self, user, wanted: bytes, limit: int, timeout: float = TIMEOUT):
        """A Deferred firing with ``[Peer]``, one for each peer in this node's
        table, in its order, once every peer asked answered or after
        ``timeout`` seconds: their counts of the queues ``user`` may touch
        (its queue patterns go with the question) holding ``wanted``, the
        ``limit`` longest on each."""
        runtime = self.runtime
        runtime.set_time()
        self._token = self._token % 0xFFFFFFFF + 1
        token = self._token
        patterns = () if user.all_queues else tuple(user.queues[:wire.MAX_PATTERNS])
        ask = messages.CountsAsk(token, min(limit, wire.MAX_COUNTS), wanted, user.all_queues, patterns)
        peers = []
        waiting = _Waiting()
        cluster = self.node.cluster
        for n in cluster.peers():
            if not n.connected or n.handshake:
                peers.append(Peer(n.id, UNREACHABLE, n.host))
            elif not n.counts:
                peers.append(Peer(n.id, OLD_VERSION, n.host))
            else:
                peer = Peer(n.id, TIMED_OUT, n.host)  # until it answers
                waiting[n.id] = peer
                peers.append(peer)
                cluster.send(n.id, ask)
        runtime.after_batch()
        waiting.result = peers
        if not waiting:
            return defer.succeed(peers)
        self._pending[token] = waiting
        waiting.timer = runtime.reactor.callLater(timeout, self._time_out, token)
        return waiting.deferred

    def _time_out(self, token: int) -> None:
        waiting = self._pending.pop(token, None)
        if waiting is not None:
            waiting.fire()


class _Waiting(dict):
    """The peers asked in one gathering, by ID, and what fires when it ends."""

    def __init__(self):
        super().__init__()
        self.deferred = defer.Deferred()
        self.result = None
        self.timer = None

    def fire(self) -> None:
        if self.timer is not None and self.timer.active():
            self.timer.cancel()
        if not self.deferred.called:
            self.deferred.callback(self.result)
