"""The counters and histograms the node keeps for /metrics and the HTTP
API (disque.core.latency): the pure core with its clock set by hand."""

import random

from hypothesis import given, strategies as st

from disque.core.latency import BOUNDS, Histogram
from disque.core.node import NodeState
from disque.testing import SimCluster


def fresh():
    return NodeState(b"f" * 40, 1_000_000, rng=random.Random(1))


def test_histogram_buckets_follow_the_le_convention():
    h = Histogram()
    for ms in (0, 1, 2, 3, 1000, 1001, 10 ** 9, -5):
        h.observe(ms)
    cumulative = dict(h.cumulative())
    assert cumulative[0.001] == 3  # 0, 1 and the negative one: le 1 ms
    assert cumulative[0.002] == 4
    assert cumulative[0.005] == 5
    assert cumulative[1.0] == 6 and cumulative[2.5] == 7
    assert cumulative[float("inf")] == h.count == 8
    assert h.total_ms == 0 + 1 + 2 + 3 + 1000 + 1001 + 10 ** 9


@given(st.lists(st.integers(0, 4_000_000), min_size=1, max_size=200))
def test_histogram_invariants(values):
    h = Histogram()
    for v in values:
        h.observe(v)
    assert sum(h.counts) == h.count == len(values)
    running = [n for _, n in h.cumulative()]
    assert running == sorted(running) and running[-1] == len(values)
    # A quantile estimate lies in the bucket of the true quantile.
    ordered = sorted(values)
    for q in (0.5, 0.9, 0.99):
        true = ordered[max(0, -(-int(q * len(values) * 1000) // 1000) - 1)]
        estimate = h.quantile(q) * 1000
        i = next((k for k, b in enumerate(BOUNDS) if true <= b), len(BOUNDS))
        low = BOUNDS[i - 1] if i else 0
        high = BOUNDS[i] if i < len(BOUNDS) else BOUNDS[-1]
        assert low - 1e-6 <= estimate <= high + 1e-6


def test_quantile_of_an_empty_histogram_is_zero():
    assert Histogram().quantile(0.99) == 0.0


def test_getjob_wait_observes_immediate_and_blocked_gets():
    node = fresh()
    wait = node.latency.getjob_wait
    node.addjob.add(b"q", b"x", 1, 0, -1, 3600, 0, False)
    assert node.getjob.get_jobs([b"q"], 5)
    assert (wait.count, wait.counts[0]) == (1, 1)
    assert node.getjob.get_jobs([b"q"], 1) == []  # nothing served: nothing observed
    assert wait.count == 1
    client = object()
    node.getjob.block(client, [b"q"], 0, lambda jobs: jobs, None)
    node.set_time(node.now + 700)
    node.addjob.add(b"q", b"y", 1, 0, -1, 3600, 0, False)
    node.getjob.serve_ready()
    assert wait.count == 2 and wait.total_ms == 700
    node.getjob.block(client, [b"q"], 300, lambda jobs: jobs, None)
    node.set_time(node.now + 300)
    node.run_due()  # the timeout
    assert wait.count == 3 and wait.total_ms == 1000


def test_acks_and_nacks_are_counted_per_queue_with_the_job_time():
    node = fresh()
    a = node.addjob.add(b"q", b"x", 1, 0, -1, 3600, 0, False)
    b = node.addjob.add(b"q", b"y", 1, 0, -1, 3600, 0, False)
    node.getjob.get_jobs([b"q"], 2)
    node.set_time(node.now + 2000)
    assert node.requeue.nack_jobs([a.id]) == 1
    assert node.requeue.enqueue_jobs([b.id]) == 1  # ENQUEUE is not a NACK
    q = node.queues.get(b"q")
    assert (q.nacked, node.queues.nacked) == (1, 1)
    node.acks.ack_jobs([a.id])
    node.acks.fast_ack([b.id])
    node.acks.ack_jobs([a.id])  # already acknowledged: not counted again
    assert (q.acked, node.acks.acked) == (2, 2)
    to_ack = node.latency.add_to_ack
    assert to_ack.count == 2 and to_ack.total_ms == 4000
    assert dict(to_ack.cumulative())[2.5] == 2 and dict(to_ack.cumulative())[1.0] == 0


def test_replication_time_is_observed_when_the_copies_are_confirmed():
    sim = SimCluster(3)
    sim.chain_meet()
    sim.settle(3000)
    node = sim.nodes[0]
    node.set_time(sim.now)
    job = node.addjob.add(b"q", b"x", 3, 0, -1, 3600, 0, False)
    node.addjob.await_replication(job, object(), 0, b"OK", b"NOREPL")
    assert node.job_states()["wait-repl"] == 1
    sim._drain(0)
    sim.pump()
    repl = node.latency.addjob_replication
    assert repl.count == 1
    assert node.job_states() == {"wait-repl": 0, "active": 0, "queued": 1, "acked": 0}
    single = sim.nodes[1]
    single.set_time(sim.now)
    single.addjob.add(b"q", b"x", 1, 0, -1, 3600, 0, False)  # no copies to wait for
    assert single.latency.addjob_replication.count == 0
