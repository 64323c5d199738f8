"""Queue limits (QLIMIT, docs/extensions.md): at most R deliveries a
second with a burst of B (a token bucket), and at most C jobs delivered
and not yet done, for a queue as a whole, cluster-wide.

A limit is a catalog entry (:mod:`disque.core.settings`) of kind
``limit`` named for its queue, so every node holds the same limits and
applies them the one way, in :meth:`QueueLimits.apply`, whether the entry
came from QLIMIT here, from a peer or from the AOF.  Its value is
:func:`encode`'s (a version byte first); a value of a version this node
cannot read is ignored (the limit in force stays).

What counts:

* a **delivery** is a job GETJOB hands to a client here (a job federation
  moves to a peer is not);
* a delivery under a concurrency limit is **in flight** until the job is
  acknowledged, NACKed, queued again (its RETRY passed, here or on a node
  we hear from: QUEUED, NACKDELAY), deleted or expired.  The job carries
  ``F_LIMIT_SLOT`` meanwhile; whoever ends its flight calls
  :meth:`QueueLimits.release` (queues.enqueue, acks.acknowledge,
  jobs.unregister, requeue.on_queued / on_nackdelay).

Invariants:

* ``by_name`` holds the limited queues only: it is empty when no limit
  exists, and GETJOB's check for an unlimited queue is that emptiness;
* ``inflight[q]`` counts exactly the jobs of ``q`` flagged
  ``F_LIMIT_SLOT`` (entries at 0 are removed); on one node it never
  passes ``C``;
* a limit never takes a job out of its queue: held jobs stay queued, and
  clients waiting on the queue are served in their order as tokens come
  back (a ``Refill`` timer in ``node.timers`` at the exact time of the
  next token) or slots free (:meth:`release`, a new split).

The cluster split (:mod:`disque.core.budget`) comes from QDEMAND reports,
sent every ``DEMAND_PERIOD_MS`` to the peers that read bus version 6;
nothing here draws from ``node.rng``.
"""

import struct
from typing import NamedTuple

from . import messages
from .budget import slots as split_slots, weight
from .job import F_LIMIT_SLOT
from .queue import PAUSED_OUT

KIND = b"limit"
VALUE_VERSION = 1
_VALUE = struct.Struct(">BQII")  # version, rate in thousandths a second (0: none), burst, concurrency (0: none)
MAX_RATE_MILLI = 1_000_000_000  # a million deliveries a second
MAX_COUNT = (1 << 31) - 1  # BURST and CONCURRENCY
DEMAND_PERIOD_MS = 200  # QDEMAND reports: five a second
REPORT_TTL_MS = 1500  # a peer's report older than this no longer counts


class Limit(NamedTuple):
    rate_milli: int  # deliveries per 1000 s (RATE 2.5 is 2500); 0: no rate limit
    burst: int
    concurrency: int  # 0: no concurrency limit


def encode(limit: Limit) -> bytes:
    return _VALUE.pack(VALUE_VERSION, *limit)


def decode(value: bytes):
    """The Limit of a catalog value, or None if this version cannot read it."""
    if len(value) != _VALUE.size or value[0] != VALUE_VERSION:
        return None
    _, rate, burst, conc = _VALUE.unpack(value)
    if rate > MAX_RATE_MILLI or burst > MAX_COUNT or conc > MAX_COUNT or (rate and not burst) or not (rate or conc):
        return None
    return Limit(rate, burst, conc)


def default_burst(rate_milli: int) -> int:
    """max(1, R): one second's worth of deliveries."""
    return max(1, rate_milli // 1000)


def format_rate(rate_milli: int) -> bytes:
    """2500 -> b"2.5", 50000 -> b"50"."""
    whole, frac = divmod(rate_milli, 1000)
    return b"%d" % whole if not frac else (b"%d.%03d" % (whole, frac)).rstrip(b"0")


class Refill:
    """The timer of a queue whose bucket is empty: it fires when the next
    token comes (an item of ``node.timers``).  It names its queue rather
    than pointing back at its QueueLimit: no reference cycle."""

    __slots__ = ("queue", "awake")

    def __init__(self, queue):
        self.queue = queue
        self.awake = 0


class QueueLimit:
    """One limited queue on this node: the limit, this node's part of it,
    its bucket and its counters.  ``tokens`` never exceeds ``cap``."""

    __slots__ = ("name", "limit", "rate", "cap", "tokens", "filled", "share", "slots", "granted", "room",
                 "grow_after", "demand", "peak", "cut", "held", "delivered", "refill")

    def __init__(self, name, now):
        self.name = name
        self.limit = None
        self.rate = 0.0  # this node's tokens per ms
        self.cap = 0.0  # this node's burst
        self.tokens = 0.0
        self.filled = now  # when tokens was last brought up to date
        self.share = 1.0  # this node's part of the rate (alone: all)
        self.slots = 0  # this node's part of the concurrency, as split
        self.granted = 0  # the part it uses: the split's, a rise only once the others reported since
        self.room = 0  # C less, for each other node, the most it may hold (its report or its part)
        self.grow_after = None  # a rise of slots waits for two reports from each peer numbered past this
        self.demand = 0  # the demand this node last reported
        self.peak = 0  # most clients seen waiting since the last report
        self.cut = set()  # the clients whose new GETJOB the limit cut short since the last report
        self.held = 0  # GETJOBs the limit cut short or made wait (QSTAT held)
        self.delivered = 0  # deliveries under the limit (QSTAT)
        self.refill = Refill(name)

    def fill(self, now: int) -> float:
        tokens = self.tokens + (now - self.filled) * self.rate
        self.tokens = tokens if tokens < self.cap else self.cap
        self.filled = now
        return self.tokens

    def resize(self, share: float, now: int) -> None:
        """This node's part of the rate becomes ``share`` of it."""
        limit = self.limit
        if limit.rate_milli:
            self.fill(now)
        self.share = share
        self.rate = limit.rate_milli * share / 1e6
        self.cap = max(1.0, limit.burst * share) if limit.rate_milli else 0.0
        if self.tokens > self.cap:
            self.tokens = self.cap


class QueueLimits:
    """The node's queue limits (``node.qlimits``): see the module docstring."""

    def __init__(self, node):
        self.node = node
        self.by_name = {}  # queue name -> QueueLimit; empty when no queue is limited
        self.inflight = {}  # queue name -> jobs in flight here (F_LIMIT_SLOT)
        # peer ID -> (when, number of its previous report, its number, {queue: (demand, in flight)})
        self.reports = {}
        self._received = 0  # reports received: their numbers
        self.held = 0  # GETJOBs held, all queues: INFO, /metrics
        self._last_report = 0

    def handlers(self) -> dict:
        return {messages.QDemand: self.on_demand}

    # -- the catalog ---------------------------------------------------------

    def apply(self, entry) -> None:
        """The catalog hook of kind ``limit``: the queue's limit is now
        ``entry``'s (none for a tombstone)."""
        name = entry.name
        node = self.node
        if entry.deleted:
            lim = self.by_name.pop(name, None)
            if lim is None:
                return
            if lim.refill.awake:
                node.timers.remove(lim.refill)
        else:
            limit = decode(entry.value)
            if limit is None:
                return  # a newer version's value: the limit in force stays
            lim = self.by_name.get(name)
            fresh = lim is None
            if fresh:
                lim = self.by_name[name] = QueueLimit(name, node.now)
            had_rate = not fresh and lim.limit.rate_milli
            lim.limit = limit
            self._split(lim)
            if not had_rate:  # a new bucket starts full
                lim.tokens = lim.cap
        self._wake(name)

    # -- GETJOB ----------------------------------------------------------------

    def fetch(self, lim: QueueLimit, q, ask: bool = False, client=None):
        """The next job of ``q`` (which has jobs) for a client, or None if
        the limit holds it back now.  ``ask``: for a new GETJOB of
        ``client`` (not a client already waiting)."""
        node = self.node
        limit = lim.limit
        if limit.rate_milli and lim.fill(node.now) < 1.0:
            self.hold(lim, ask, client)
            return None
        if limit.concurrency:
            here = self.inflight.get(lim.name, 0)
            if here >= lim.granted or here >= lim.room:
                self.hold(lim, ask, client)
                return None
            self.inflight[lim.name] = here + 1
        if limit.rate_milli:
            lim.tokens -= 1.0
        job = node.queues.fetch(q)
        if limit.concurrency:
            job.flags |= F_LIMIT_SLOT
        lim.delivered += 1
        return job

    def hold(self, lim: QueueLimit, ask: bool = False, client=None) -> None:
        """A delivery was held back: if the bucket is empty, its refill
        timer set for the next token.  ``ask``: a new GETJOB of ``client``
        was cut short (or made to wait), counted (QSTAT ``held``) and part
        of the demand, as one consumer however often it asks (a NOHANG
        poller is one consumer, not one per call); a client already
        waiting was counted when its GETJOB was."""
        if ask:
            lim.held += 1
            self.held += 1
            lim.cut.add(client)
        if lim.rate and lim.tokens < 1.0 and not lim.refill.awake:
            wait = (1.0 - lim.tokens) / lim.rate
            at = lim.filled + int(wait) + (wait > int(wait))
            self.node.timers.insert(lim.refill, max(at, self.node.now + 1))

    def refilled(self, refill: Refill) -> None:
        """A Refill timer fired (the schedule unscheduled it)."""
        self._wake(refill.queue)

    def release(self, job) -> None:
        """``job``'s flight ended (see the module docstring): its slot frees."""
        job.flags &= ~F_LIMIT_SLOT
        name = job.queue
        inflight = self.inflight
        n = inflight.get(name, 0) - 1
        if n > 0:
            inflight[name] = n
        else:
            inflight.pop(name, None)
        if name in self.by_name:
            self._wake(name)

    def _wake(self, name: bytes) -> None:
        """Clients wait on ``name`` and it has jobs: serve them again."""
        queues = self.node.queues
        q = queues.get(name)
        if q is not None and q.waiting and q.jobs and not q.flags & PAUSED_OUT:
            queues.ready.append(q)

    # -- the cluster split -----------------------------------------------------

    def cron(self) -> None:
        """Sample the waiting clients; every ``DEMAND_PERIOD_MS`` report
        this node's demand to its peers and split again."""
        by_name = self.by_name
        if not by_name:
            self.reports.clear()
            return
        node = self.node
        now = node.now
        queues = node.queues
        for name, lim in by_name.items():
            q = queues.get(name)
            waiting = len(q.waiting) if q is not None and q.waiting else 0
            if waiting > lim.peak:
                lim.peak = waiting
        if now - self._last_report < DEMAND_PERIOD_MS:
            return
        self._last_report = now
        for peer_id, (when, _, _, _) in list(self.reports.items()):
            if now - when > REPORT_TTL_MS:
                del self.reports[peer_id]
        report = []
        inflight = self.inflight
        for name, lim in by_name.items():
            here = inflight.get(name, 0)
            lim.demand = max(lim.peak, len(lim.cut)) + (here if lim.limit.concurrency else 0)
            q = queues.get(name)
            lim.peak = len(q.waiting) if q is not None and q.waiting else 0
            lim.cut.clear()
            report.append(messages.QueueDemand(name, lim.demand, here))
        msg = messages.QDemand(tuple(report))
        cluster = node.cluster
        for peer in cluster.peers():
            if peer.settings and not peer.handshake:
                cluster.send(peer.id, msg)
        for lim in by_name.values():
            self._split(lim)
            self._wake(lim.name)

    def on_demand(self, sender: bytes, msg) -> None:
        self._received += 1
        previous = self.reports.get(sender)
        self.reports[sender] = (self.node.now, 0 if previous is None else previous[2], self._received,
                                {d.queue: (d.demand, d.inflight) for d in msg.queues})
        for d in msg.queues:
            lim = self.by_name.get(d.queue)
            if lim is not None:
                self._split(lim)
                self._wake(d.queue)

    def _split(self, lim: QueueLimit) -> None:
        """This node's part of ``lim`` from the reports held
        (:mod:`disque.core.budget`).  The nodes counted: this one, every
        peer that reads version 6 and is reachable (a node that has not
        reported yet weighs as one with no demand, holding nothing), and
        every peer whose report is still fresh.

        Concurrency (the bound of docs/extensions.md): this node holds at
        most ``granted`` and at most ``room``.  ``room`` is C less, for each
        other node, the larger of what it reported in flight and its part:
        what it may hold now.  A smaller part applies at once; a larger one
        (``granted`` rising, from 0 for a new limit) only once every peer
        counted has sent two reports since: the second was sent one period
        after the first, so after the peer applied the same split, as long
        as the bus delivers within half a period (it then holds no more
        than it reports, or than its part, and the parts add up to C).
        Alone, a node takes its part at once."""
        node = self.node
        me = node.my_id
        name = lim.name
        reports = self.reports
        weights = {me: weight(lim.demand)}
        inflight = {}
        for peer in node.cluster.peers():
            if peer.settings and peer.reachable and not peer.leaving:
                weights[peer.id] = weight(0)
        for peer_id, (_, _, _, queues) in reports.items():
            demand, inflight[peer_id] = queues.get(name, (0, 0))
            weights[peer_id] = weight(demand)
        lim.resize(weights[me] / sum(weights.values()), node.now)
        concurrency = lim.limit.concurrency
        if not concurrency:
            return
        parts = split_slots(concurrency, weights)
        mine = lim.slots = parts[me]
        lim.room = concurrency - sum(max(inflight.get(n, 0), part) for n, part in parts.items() if n != me)
        if mine > lim.granted and lim.grow_after is None:
            lim.grow_after = self._received
        if mine <= lim.granted or all(n == me or n in reports and reports[n][1] > lim.grow_after for n in parts):
            lim.granted = mine
            lim.grow_after = None

    # -- resets ------------------------------------------------------------------

    def forget_inflight(self) -> None:
        """Every job is gone (DEBUG FLUSHALL, CLUSTER RESET HARD)."""
        self.inflight.clear()
