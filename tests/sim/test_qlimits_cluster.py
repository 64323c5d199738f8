"""Queue limits across a simulated cluster (pure cores, one fake clock):
the limit set on one node reaches the others and stops applying once
removed; a rate of 50/s with skewed consumers on three nodes is delivered
at 50/s; a concurrency of 5 stays within its documented bound cluster-wide
(docs/extensions.md, "Queue limits") and within 5 on every node."""

import random
from collections import deque

import pytest

from disque.core import messages, qlimits
from disque.core.qlimits import Limit
from disque.testing import SimCluster
from tests.support.sim import cluster

Q = b"lq"


def set_limit(sim, i, rate=0, burst=0, concurrency=0):
    milli = rate * 1000
    burst = burst or (qlimits.default_burst(milli) if milli else 0)
    sim.call(i, "settings.change", qlimits.KIND, Q, qlimits.encode(Limit(milli, burst, concurrency)))


def add_jobs(sim, i, n):
    node = sim.nodes[i]
    node.set_time(sim.now)
    for _ in range(n):
        node.addjob.add(Q, b"x", 1, 0, -1, 3600, 0, False)
    sim._drain(i)
    sim.pump()


def _serve(jobs):
    return jobs


def delay_reports(sim, ms):
    """Every QDEMAND takes ``ms`` to cross the bus (the rest none): the
    bound of docs/extensions.md holds while that is under half a report
    period."""
    deliver = sim.pump
    later = []

    def pump(limit=1_000_000):
        kept = deque()
        while sim.queue:
            item = sim.queue.popleft()
            (later.append((sim.now + ms, item)) if type(item[3]) is messages.QDemand else kept.append(item))
        sim.queue.extend(kept)
        due = [item for t, item in later if t <= sim.now]
        later[:] = [(t, item) for t, item in later if t > sim.now]
        n = deliver(limit)
        for sender, receiver, header, msg, link in due:
            if sim._can_talk(sender, receiver):
                sim.nodes[receiver].set_time(sim.now)
                sim.nodes[receiver].bus_receive(header, msg, link)
                sim._drain(receiver)
        return n + deliver(limit)

    sim.pump = pump


class Consumers:
    """Clients blocked in GETJOB on ``Q``, ``counts[i]`` on node ``i``.
    Each takes one job at a time and ACKs it ``hold_ms`` later, then waits
    again; ``log`` lists (time, node) of every delivery."""

    def __init__(self, sim, counts, hold_ms=0, seed=None):
        self.sim = sim
        self.hold_ms = hold_ms
        self.rng = random.Random(seed) if seed is not None else None  # hold times from 1 to 2 * hold_ms
        self.log = []
        self.holding = []  # (ack time, node, client, job id)
        self.seen = 0
        self.clients = {}
        for i, n in enumerate(counts):
            for k in range(n):
                self.join(i, (i, k))

    def join(self, i, client):
        self.clients[client] = i
        self.sim.call(i, "getjob.block", client, [Q], 0, _serve, None)

    def leave(self, client):
        i = self.clients.pop(client)
        self.sim.call(i, "getjob.unblock", client)

    def step(self, ms):
        sim = self.sim
        sim.advance(ms, step=ms)
        while self.seen < len(sim.replies) or self.holding:
            for i, client, jobs in sim.replies[self.seen:]:
                self.log += [(sim.now, i)] * len(jobs)
                hold = self.hold_ms if self.rng is None else self.rng.randint(1, 2 * self.hold_ms)
                self.holding += [(sim.now + hold, i, client, j.id) for j in jobs]
            self.seen = len(sim.replies)
            due = [h for h in self.holding if h[0] <= sim.now]
            if not due:
                break
            self.holding = [h for h in self.holding if h[0] > sim.now]
            for _, i, client, job_id in due:
                sim.call(i, "acks.ack_jobs", [job_id])
                if client in self.clients:
                    sim.call(i, "getjob.block", client, [Q], 0, _serve, None)

    def in_flight(self):
        return len(self.holding)


def test_a_limit_set_on_one_node_reaches_the_others_and_its_removal_too():
    sim = cluster(3)
    set_limit(sim, 1, rate=5, concurrency=2)
    sim.advance(300)
    for n in sim.nodes:
        assert n.qlimits.by_name[Q].limit == Limit(5000, 5, 2)
    add_jobs(sim, 0, 20)
    consumers = Consumers(sim, [3, 0, 0], hold_ms=60_000)  # jobs held: the concurrency binds
    for _ in range(50):  # the consumers' demand reaches the others: node 0 gets both slots
        consumers.step(10)
    assert len(consumers.log) == 2 and sim.nodes[0].qlimits.by_name[Q].slots == 2
    sim.call(2, "settings.change", qlimits.KIND, Q, b"")  # QLIMIT lq NONE, on another node
    consumers.step(10)
    assert all(Q not in n.qlimits.by_name for n in sim.nodes)
    assert len(consumers.log) == 3  # the third consumer, at once


def test_a_rate_of_50_with_skewed_consumers_is_delivered_at_50_a_second():
    """1, 2 and 10 consumers on the three nodes, jobs on every node:
    the cluster delivers 50/s +-10% over 20 simulated seconds, and each
    node about in proportion to its consumers."""
    sim = cluster(3)
    set_limit(sim, 0, rate=50)
    for i in range(3):
        add_jobs(sim, i, 1200)
    consumers = Consumers(sim, [1, 2, 10])
    for _ in range(200):  # 2 s to settle the split
        consumers.step(10)
    start, before = sim.now, len(consumers.log)
    for _ in range(2000):
        consumers.step(10)
    window = [i for t, i in consumers.log[before:]]
    rate = len(window) / ((sim.now - start) / 1000)
    assert 45 <= rate <= 55, rate
    per_node = [window.count(i) / len(window) for i in range(3)]
    assert per_node[0] < per_node[1] < per_node[2] and per_node[2] > 0.6, per_node
    # And never more than the burst plus the rate in any window of one second.
    times = [t for t, _ in consumers.log[before:]]
    j = 0
    for i, t in enumerate(times):
        while times[j] < t - 1000:
            j += 1
        assert i - j + 1 <= 50 + 50 + 3  # B + R * 1 s, plus one token per node for the burst's floor


def concurrency_high_water(seed, delay_ms):
    """Consumers (1, 2 and 10 on the three nodes) hold each job 1 to 600
    ms; twice the busy node's consumers leave and as many come to another.
    Checks on every step: never more than 5 on a node, and the nodes'
    counts are the consumers' jobs.  Returns the cluster's high-water mark."""
    sim = cluster(3, seed=seed)
    delay_reports(sim, delay_ms)
    set_limit(sim, 2, concurrency=5)
    for i in range(3):
        add_jobs(sim, i, 400)
    consumers = Consumers(sim, [1, 2, 10], hold_ms=300, seed=seed)
    high = 0
    for k in range(1500):
        if k in (500, 1000):
            src, dst = (2, 0) if k == 500 else (0, 1)
            for c in [c for c, i in consumers.clients.items() if i == src][:10]:
                consumers.leave(c)
                consumers.join(dst, (dst, k, c))
        consumers.step(10)
        per_node = [n.qlimits.inflight.get(Q, 0) for n in sim.nodes]
        assert max(per_node) <= 5
        assert sum(per_node) == consumers.in_flight()
        high = max(high, sum(per_node))
    late = [i for t, i in consumers.log if t > sim.now - 4000]
    assert late.count(1) > late.count(2)  # the consumers that moved there are served
    return high


def test_a_nohang_poller_weighs_as_one_consumer_in_the_split():
    """A client polling with GETJOB NOHANG every 5 ms on node 0, and four
    blocked consumers on each of the others: the poller is one consumer
    (its calls are not each a consumer), so node 0's part of the rate is
    about one ninth, not most of it; the cluster still delivers 50/s."""
    sim = cluster(3)
    set_limit(sim, 0, rate=50)
    for i in range(3):
        add_jobs(sim, i, 1200)
    consumers = Consumers(sim, [0, 4, 4])
    poller = "poller"

    def poll():
        jobs = sim.call(0, "getjob.get_jobs", [Q], 1, poller)
        consumers.log += [(sim.now, 0)] * len(jobs)
        if jobs:
            sim.call(0, "acks.ack_jobs", [j.id for j in jobs])

    for _ in range(400):  # 2 s to settle the split
        consumers.step(5)
        poll()
    start, before = sim.now, len(consumers.log)
    for _ in range(4000):
        consumers.step(5)
        poll()
    window = [i for t, i in consumers.log[before:]]
    rate = len(window) / ((sim.now - start) / 1000)
    assert 45 <= rate <= 55, rate
    per_node = [window.count(i) / len(window) for i in range(3)]
    assert per_node[0] < 0.2 and per_node[0] < per_node[1] and per_node[0] < per_node[2], per_node
    assert sim.nodes[0].qlimits.by_name[Q].held > 1000  # it was held back, call after call


@pytest.mark.parametrize("delay_ms", [0, 90])
@pytest.mark.parametrize("seed", range(3))
def test_a_concurrency_of_5_is_never_passed_as_consumers_move(seed, delay_ms):
    """The bound of docs/extensions.md while QDEMAND crosses the bus within
    half a report period (100 ms): C, cluster-wide; and the limit is used."""
    assert concurrency_high_water(seed, delay_ms) == 5


def test_a_concurrency_of_5_on_a_slow_bus_stays_within_c_plus_the_slots_moved():
    """QDEMAND a second late (five report periods): the parts may overlap
    while a change crosses the bus, by at most the slots that moved (m <= C)."""
    assert 5 <= concurrency_high_water(2, 1000) <= 10


def test_demand_goes_only_to_peers_that_read_version_6():
    """A peer of an older bus version (no H_SETTINGS) is sent no QDEMAND
    and counts for nothing in the split: it never saw the limit."""
    sim = SimCluster(3)
    view = sim.nodes[2].cluster
    header = view.header
    view.header = lambda: header()._replace(flags=header().flags & ~messages.H_SETTINGS)  # a version 5 node
    sim.chain_meet()
    sim.settle(3000)
    assert not any(n.cluster.nodes[view.my_id].settings for n in sim.nodes[:2])
    del sim.nodes[2].settings.hooks[qlimits.KIND]  # and it knows nothing of limits
    set_limit(sim, 0, rate=10, concurrency=4)
    sim.delivered.clear()
    sim.advance(1000)
    to = {b for a, b, m in sim.delivered if type(m) is messages.QDemand}
    assert to == {0, 1}
    for n in sim.nodes[:2]:
        lim = n.qlimits.by_name[Q]
        assert lim.share == 0.5 and lim.slots == 2


def test_a_partition_splits_the_limit_and_healing_joins_it_again():
    """As documented: each side of a partition counts only the nodes it
    hears from, so once the others are suspected each side may use the
    whole concurrency; after the partition heals the cluster is back
    within C."""
    sim = cluster(3)
    set_limit(sim, 0, concurrency=4)
    for i in range(3):
        add_jobs(sim, i, 1500)
    consumers = Consumers(sim, [4, 4, 4], hold_ms=200, seed=5)
    for _ in range(100):
        consumers.step(10)
    sim.partition([0, 1], [2])
    high = 0
    for _ in range(2500):  # 25 s: past the node timeout (15 s), the sides count only themselves
        consumers.step(10)
        per_node = [n.qlimits.inflight.get(Q, 0) for n in sim.nodes]
        high = max(high, sum(per_node))
        assert per_node[0] + per_node[1] <= 4 and per_node[2] <= 4
    assert high == 8
    sim.heal()
    for _ in range(1000):  # the sides hear each other again; then every step within C
        consumers.step(10)
    before = len(consumers.log)
    high = 0
    for _ in range(500):
        consumers.step(10)
        high = max(high, sum(n.qlimits.inflight.get(Q, 0) for n in sim.nodes))
    assert high == 4 and len(consumers.log) - before > 20  # used, never passed
