"""Queue limits (QLIMIT) on one pure core with an integer clock: the token
bucket, GETJOB with COUNT, without waiting and blocked under a rate
limit, the concurrency limit exact on one node (every way a flight ends
frees its slot), the catalog value, and the split's arithmetic."""

import random

from hypothesis import given, settings, strategies as st

from disque.core import budget, qlimits
from disque.core.catalog import Entry
from disque.core.effects import Reply
from disque.core.job import F_LIMIT_SLOT, QUEUED
from disque.core.node import NodeState
from disque.core.qlimits import Limit

NODE_ID = b"33f36033a560e0980d7d71c8fc8c0db81156cc5e"
T0 = 1_795_347_500_000


def make_node():
    return NodeState(NODE_ID, T0, rng=random.Random(7))


def add(node, queue=b"q", retry=-1, ttl=86400, n=1):
    return [node.addjob.add(queue, b"b", 1, 0, retry, ttl, 0, False) for _ in range(n)]


def limit(node, queue=b"q", rate=0, burst=0, concurrency=0):
    """RATE in deliveries a second (a float is fine), as QLIMIT sets it."""
    milli = int(round(rate * 1000))
    burst = burst or (qlimits.default_burst(milli) if milli else 0)
    node.settings.change(qlimits.KIND, queue, qlimits.encode(Limit(milli, burst, concurrency)))


def at(node, ms):
    """Move the clock to T0 + ``ms`` and run what is due (as the runtime does)."""
    node.set_time(T0 + ms)
    node.run_due()


def served(node):
    out = [e for e in node.outbox if isinstance(e, Reply)]
    node.outbox.clear()
    return [(r.client, len(r.payload)) for r in out]


def block(node, client, queue=b"q"):
    node.getjob.block(client, [queue], 0, lambda jobs: jobs, None)


# -- the catalog value ---------------------------------------------------------

def test_a_limit_round_trips_and_a_newer_version_is_ignored():
    lim = Limit(2500, 7, 3)
    assert qlimits.decode(qlimits.encode(lim)) == lim
    newer = b"\x02" + qlimits.encode(lim)[1:]
    assert qlimits.decode(newer) is None and qlimits.decode(b"") is None
    assert qlimits.decode(qlimits.encode(Limit(0, 0, 0))) is None  # limits nothing: not a value we write
    node = make_node()
    limit(node, rate=2)
    node.settings.load(Entry(qlimits.KIND, b"q", T0 + 10**6, NODE_ID, newer))  # a newer node's: no crash
    assert node.qlimits.by_name[b"q"].limit == Limit(2000, 2, 0)  # the limit in force stays


def test_format_rate():
    assert [qlimits.format_rate(m) for m in (50000, 2500, 1, 1000, 10)] == [b"50", b"2.5", b"0.001", b"1", b"0.01"]


# -- the rate limit --------------------------------------------------------------

def test_count_gets_what_the_bucket_allows_and_jobs_stay_queued():
    node = make_node()
    limit(node, rate=2)  # burst 2
    add(node, n=10)
    assert len(node.getjob.get_jobs([b"q"], 10)) == 2
    assert len(node.queues.get(b"q").jobs) == 8
    at(node, 499)
    assert node.getjob.get_jobs([b"q"], 10) == []  # NOHANG: nothing yet
    at(node, 500)
    assert len(node.getjob.get_jobs([b"q"], 10)) == 1
    at(node, 10_000)  # the bucket fills to its burst, no more
    assert len(node.getjob.get_jobs([b"q"], 10)) == 2
    assert node.qlimits.by_name[b"q"].held == 4  # once per GETJOB it cut short


def test_an_unlimited_queue_beside_a_limited_one_is_not_held():
    node = make_node()
    limit(node, b"slow", rate=1)
    add(node, b"slow", n=3)
    add(node, b"fast", n=3)
    got = node.getjob.get_jobs([b"slow", b"fast"], 10)
    assert [j.queue for j in got] == [b"slow", b"fast", b"fast", b"fast"]


def test_blocked_clients_wake_at_the_next_token_in_their_order():
    node = make_node()
    limit(node, rate=4, burst=1)  # a token every 250 ms
    add(node, n=5)
    assert len(node.getjob.get_jobs([b"q"], 1)) == 1
    for c in ("c1", "c2", "c3"):
        assert node.getjob.get_jobs([b"q"], 1) == []
        block(node, c)
    # The wake-up is a timer at the next token, not a poll.
    assert T0 + 240 <= node.next_deadline() <= T0 + 250
    at(node, 249)
    assert served(node) == []
    at(node, 250)
    assert served(node) == [("c1", 1)]
    assert node.getjob.get_jobs([b"q"], 1) == []  # a newcomer does not pass c2 and c3
    block(node, "c4")
    for t, c in ((500, "c2"), (750, "c3"), (1000, "c4")):
        at(node, node.next_deadline() - T0)
        assert node.now <= T0 + t
        at(node, t)
        assert served(node) == [(c, 1)]
    assert len(node.getjob) == 0 and not node.timers


def test_removing_the_limit_serves_the_waiting_clients_at_once():
    node = make_node()
    limit(node, rate=1)
    add(node, n=3)
    node.getjob.get_jobs([b"q"], 1)
    block(node, "c1")
    block(node, "c2")
    node.settings.change(qlimits.KIND, b"q", b"")
    node.getjob.serve_ready()
    assert served(node) == [("c1", 1), ("c2", 1)]
    assert node.qlimits.by_name == {} and not node.timers


@settings(max_examples=60, deadline=None)
@given(rate=st.integers(1, 40), burst=st.integers(1, 10),
       steps=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 8), st.booleans()), min_size=1, max_size=60))
def test_deliveries_in_any_window_stay_within_burst_plus_rate(rate, burst, steps):
    """Whatever the asks (COUNT, or blocking), deliveries in any window of
    t seconds are at most B + R * t."""
    node = make_node()
    limit(node, rate=rate, burst=burst)
    add(node, n=500)
    times = []
    now = 0
    for i, (wait, count, blocking) in enumerate(steps):
        now += wait
        at(node, now)
        times += [now] * len(node.getjob.get_jobs([b"q"], count))
        if blocking and not node.getjob.is_blocked(i):
            block(node, i)
        times += [now] * sum(n for _, n in served(node))
    at(node, now + 5000)
    times += [now + 5000] * sum(n for _, n in served(node))
    for i, start in enumerate(times):
        for j in range(i, len(times)):
            assert j - i + 1 <= burst + rate * (times[j] - start) / 1000 + 1e-9


# -- the concurrency limit -----------------------------------------------------------

def test_concurrency_is_exact_and_every_end_of_a_flight_frees_a_slot():
    node = make_node()
    limit(node, concurrency=2)
    jobs = add(node, n=4, retry=5, ttl=3600) + add(node, n=1, retry=5, ttl=20)
    inflight = node.qlimits.inflight
    a, b = node.getjob.get_jobs([b"q"], 10)
    assert inflight[b"q"] == 2 and a.flags & F_LIMIT_SLOT
    block(node, "c")
    node.acks.ack_jobs([a.id])  # ACKJOB
    node.getjob.serve_ready()
    [(client, [c])] = [(e.client, e.payload) for e in node.outbox if isinstance(e, Reply)]
    node.outbox.clear()
    assert client == "c" and inflight[b"q"] == 2
    assert node.requeue.nack_jobs([b.id]) == 1  # NACK: queued again, its slot free
    assert b.state == QUEUED and not b.flags & F_LIMIT_SLOT and inflight[b"q"] == 1
    [d] = node.getjob.get_jobs([b"q"], 10)
    assert node.getjob.get_jobs([b"q"], 10) == []
    node.acks.delete_jobs([d.id])  # DELJOB
    assert inflight[b"q"] == 1
    [e] = node.getjob.get_jobs([b"q"], 10)
    at(node, 6000)  # c's RETRY (5 s) passed: queued again
    assert c.state == QUEUED and e.state == QUEUED and b"q" not in inflight
    node.getjob.get_jobs([b"q"], 10)
    assert inflight[b"q"] == 2
    ttl20 = jobs[-1]
    for job in node.getjob.get_jobs([b"q"], 10):
        node.acks.ack_jobs([job.id])
    mine = [j for j in jobs if j.flags & F_LIMIT_SLOT]
    assert len(mine) == 2 and inflight[b"q"] == 2
    at(node, 21_000)  # past a TTL: the job is gone, its slot free
    assert node.jobs.get(ttl20.id) is None
    assert inflight.get(b"q", 0) == sum(1 for j in jobs if j.flags & F_LIMIT_SLOT and node.jobs.get(j.id))


def test_a_changed_limit_applies_at_once_on_one_node():
    node = make_node()
    limit(node, concurrency=1)
    add(node, n=5)
    assert len(node.getjob.get_jobs([b"q"], 10)) == 1
    limit(node, concurrency=3)  # more: at once (no peer to wait for)
    assert len(node.getjob.get_jobs([b"q"], 10)) == 2
    limit(node, concurrency=2)  # fewer: nothing more until one is done
    assert node.getjob.get_jobs([b"q"], 10) == [] and node.qlimits.inflight[b"q"] == 3
    limit(node, rate=1)  # a rate only: in flight no longer limits
    assert len(node.getjob.get_jobs([b"q"], 10)) == 1


@settings(max_examples=60, deadline=None)
@given(conc=st.integers(1, 5),
       ops=st.lists(st.tuples(st.sampled_from(["get", "ack", "nack", "del", "block", "wait"]), st.integers(1, 6)),
                    min_size=1, max_size=80))
def test_in_flight_never_passes_the_limit_on_one_node(conc, ops):
    node = make_node()
    limit(node, concurrency=conc)
    add(node, n=200, retry=2, ttl=3600)
    held = []
    now = 0
    clients = 0
    for op, n in ops:
        if op == "get":
            held += node.getjob.get_jobs([b"q"], n)
        elif op == "block":
            clients += 1
            block(node, clients)
        elif op == "wait":
            now += n * 700
            at(node, now)
        elif held:
            job = held.pop(n % len(held))
            if op == "ack":
                node.acks.ack_jobs([job.id])
            elif op == "nack":
                node.requeue.nack_jobs([job.id])
            else:
                node.acks.delete_jobs([job.id])
        node.getjob.serve_ready()
        for e in node.outbox:
            if isinstance(e, Reply):
                held += e.payload
        node.outbox.clear()
        flying = [j for j in node.jobs.values() if j.flags & F_LIMIT_SLOT]
        assert len(flying) == node.qlimits.inflight.get(b"q", 0) <= conc


# -- the split -----------------------------------------------------------------------

def test_a_part_shrinks_at_once_and_grows_only_after_two_reports_from_each_peer():
    """The hand-over behind the concurrency bound (docs/extensions.md): a
    busy peer takes the slots at once; when it goes quiet, this node takes
    its part back only after two reports of the peer sent since."""
    from disque.core import messages

    node = make_node()
    limit(node, concurrency=4)
    add(node, n=10)
    peer = b"p" * 40

    def report(demand, inflight):
        node.qlimits.on_demand(peer, messages.QDemand((messages.QueueDemand(b"q", demand, inflight),)))

    report(10, 4)  # a peer with ten consumers and four jobs out
    lim = node.qlimits.by_name[b"q"]
    assert (lim.slots, lim.granted, lim.room) == (0, 0, 0)
    assert node.getjob.get_jobs([b"q"], 10) == []
    report(0, 0)  # it went quiet: half the slots are ours, not yet
    assert (lim.slots, lim.granted) == (2, 0)
    report(0, 0)
    assert node.getjob.get_jobs([b"q"], 10) == []
    report(0, 0)  # the second report sent since the change
    assert lim.granted == 2 and lim.room == 2
    assert len(node.getjob.get_jobs([b"q"], 10)) == 2
    report(0, 3)  # what a peer reports in flight is never counted less than its part
    assert lim.room == 1 and node.getjob.get_jobs([b"q"], 10) == []


@given(st.integers(0, 50), st.dictionaries(st.binary(min_size=1, max_size=3), st.integers(0, 20), min_size=1))
def test_slots_add_up_to_the_limit_starve_no_one_and_follow_the_weights(conc, demands):
    weights = {k: budget.weight(d) for k, d in demands.items()}
    got = budget.slots(conc, weights)
    assert sum(got.values()) == conc and set(got) == set(weights)
    wanting = [k for k, d in demands.items() if d]
    if conc >= len(wanting):
        assert all(got[k] >= 1 for k in wanting)  # no consumer starves
        rest = conc - len(wanting)
        total = sum(weights.values())
        for k, w in weights.items():  # the rest by weight: within one of the exact quota
            assert abs(got[k] - (k in wanting) - rest * w / total) < 1
    for a in weights:
        for b in weights:
            if demands[a] > demands[b]:
                assert got[a] >= got[b]  # more demand, never fewer slots
    assert budget.slots(conc, dict(reversed(list(weights.items())))) == got  # the same on every node
