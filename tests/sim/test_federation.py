"""Federation: the default policy's delays (unit, fake time), and
NEEDJOBS/YOURJOBS between pure cores wired in memory."""

import math
import random

from zope.interface.verify import verifyObject

from disque.core.job import ACTIVE, Job, QUEUED
from disque.core import messages
from disque.core.federation import RETURN_WINDOW_MS
from disque.core.node import NodeState
from disque.core.queue import PAUSED_OUT, Queue
from disque.federation.default import (ADHOC_MAX_DELAY, ADHOC_MIN_DELAY, BCAST_MAX_DELAY, BCAST_MIN_DELAY,
                                       IMPORT_RATE_WINDOW, DefaultPolicy)
from disque.interfaces import IFederationPolicy, IFederationPolicyFactory, IFederationState
from disque.plugins import find_strategy
from disque.testing import SimCluster

PEERS = (b"a" * 40, b"b" * 40)


def asks(policy, q, now, reason="waiting", waiting=1):
    return policy.wanted(q, now, reason, PEERS, waiting)


# -- the policy alone --------------------------------------------------------------

def test_provider_found_by_name_and_interfaces_hold():
    f = find_strategy(IFederationPolicyFactory, "default")
    assert verifyObject(IFederationPolicyFactory, f)
    policy = f.make("", None)
    assert verifyObject(IFederationPolicy, policy)
    q = Queue(b"q", 0)
    asks(policy, q, 1000)
    assert verifyObject(IFederationState, q.fed)
    assert f.name == "default"


T0 = 1_000_000  # ms: a clock far from zero, as a real one is


def bcast(reqs):
    return [r for r in reqs if r[1] == 1 and set(r[0]) == set(PEERS)]


def adhoc(reqs, source=PEERS[0]):
    return [r for r in reqs if r[0] == (source,)]


def test_broadcast_for_one_job_with_delays_from_2s_to_30s_while_nothing_comes():
    p, q = DefaultPolicy(), Queue(b"q", 0)
    sent_at = [now for now in range(T0, T0 + 120_000, 25) if bcast(asks(p, q, now))]
    assert sent_at[0] == T0  # a cold queue asks at once
    gaps = [b - a for a, b in zip(sent_at, sent_at[1:])]
    # As the original: the delay doubles with each broadcast (2 s << attempt,
    # counted after the first one), "more than the delay" at 25 ms steps.
    assert gaps[:4] == [d + 25 for d in (2 * BCAST_MIN_DELAY, 8000, 16000, BCAST_MAX_DELAY)]
    assert all(g == BCAST_MAX_DELAY + 25 for g in gaps[3:])


def test_a_new_source_resets_the_broadcast_delay():
    p, q = DefaultPolicy(), Queue(b"q", 0)
    for now in range(T0, T0 + 20_000, 25):
        asks(p, q, now)
    assert q.fed.bcast_attempt == 3
    p.received(q, PEERS[1], 1, T0 + 20_000)
    assert q.fed.bcast_attempt == 0


def test_ad_hoc_requests_to_recent_sources_from_25ms_to_2s_reset_by_jobs():
    p, q = DefaultPolicy(), Queue(b"q", 0)
    asks(p, q, T0)  # the first broadcast
    p.received(q, PEERS[0], 3, T0 + 10)
    times = []
    for now in range(T0 + 11, T0 + 8000):
        q.fed.responders[PEERS[0]] = now  # still a recent source (white box: no reset)
        if adhoc(asks(p, q, now)):
            times.append(now)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert times[0] == T0 + 11  # at once
    assert gaps[:6] == [51, 101, 201, 401, 801, 1601]  # more than 50 ms, 100 ms, ... (25 << attempt)
    assert max(gaps) == ADHOC_MAX_DELAY + 1
    p.received(q, PEERS[0], 1, T0 + 8000)  # jobs again: back to the minimum delay
    last = times[-1]
    assert not adhoc(asks(p, q, last + ADHOC_MIN_DELAY))
    assert adhoc(asks(p, q, last + ADHOC_MIN_DELAY + 1))


def test_no_throttling_when_a_stream_drains_the_queue_and_nothing_without_one():
    p, q = DefaultPolicy(), Queue(b"q", 0)
    assert asks(p, q, T0, "zero") == ()  # dropped to zero, no import going on
    asks(p, q, T0)
    p.received(q, PEERS[0], 5, T0 + 1)
    for t in range(T0 + 2, T0 + 10):  # every time it drops to zero, at once
        assert adhoc(asks(p, q, t, "zero"))
        assert adhoc(asks(p, q, t, "zero-blocked"))
    assert not adhoc(asks(p, q, T0 + 10, "waiting"))  # plain demand is throttled


def test_import_rate_and_request_size_as_the_original():
    p, q = DefaultPolicy(), Queue(b"q", 0)
    asks(p, q, T0)
    p.received(q, PEERS[0], 1, T0 + 10)
    assert q.fed.import_rate(T0 + 10) == 20  # 1 job over the 50 ms minimum window
    p.received(q, PEERS[0], 299, T0 + 900)
    assert q.fed.import_rate(T0 + 1000) == 300  # 300 jobs in 1 s
    p.received(q, PEERS[1], 1, T0 + 1950)  # a new window: current becomes previous
    assert q.fed.import_rate(T0 + 1950) == math.ceil(301 * 1000 / 1950)
    reqs = asks(p, q, T0 + 1950, "zero")
    sizes = {r[0]: r[1] for r in reqs}
    assert sizes[tuple(sorted(PEERS))] == 77  # rate / 2 sources, within 5..100
    assert q.fed.import_rate(T0 + 1950 + IMPORT_RATE_WINDOW + 1) == 0
    asks(p, q, T0 + 8000)
    assert q.fed.sources() == ()  # sources expire after 5 s


def test_serving_half_the_queue_unless_there_is_plenty_and_not_while_importing():
    p, q = DefaultPolicy(), Queue(b"q", 0)
    for i in range(30):
        q.jobs.add(Job(b"%040d" % i, b"q", b"", QUEUED, 1, i, 10**9, 0, 5, 1))
    assert p.to_serve(q, PEERS[0], 10, T0) == 10  # 30 >= 2 * 10
    assert p.to_serve(q, PEERS[0], 20, T0) == 15  # half of what we have
    assert p.to_serve(q, PEERS[0], 100, T0) == 15
    p.received(q, PEERS[1], 1, T0)
    assert p.to_serve(q, PEERS[0], 10, T0 + 10) == 0  # importing it ourselves


# -- between nodes ---------------------------------------------------------------------

def mesh(n=3, **kw):
    sim = SimCluster(n, **kw)
    sim.chain_meet()
    sim.settle(3000)
    return sim


def block(sim, i, handle, queue=b"q"):
    node = sim.nodes[i]
    node.set_time(sim.now)
    assert node.getjob.get_jobs([queue], 1) == []
    node.getjob.block(handle, [queue], 0, lambda jobs: [j.id for j in jobs], None)
    sim._drain(i)
    sim.pump()


def add(sim, i, body=b"x", queue=b"q", repl=1, retry=0):
    node = sim.nodes[i]
    node.set_time(sim.now)
    job = node.addjob.add(queue, body, repl, 0, retry, 600, 0, False)
    sim._drain(i)
    sim.pump()
    return job


def served(sim, handle):
    return [p for _, h, p in sim.replies if h is handle]


def test_a_blocked_consumer_gets_a_job_produced_elsewhere_within_the_broadcast_delay():
    sim = mesh()
    consumer = object()
    block(sim, 1, consumer)
    sim.advance(500)
    job = add(sim, 0)
    t = sim.now
    while not served(sim, consumer) and sim.now - t < 5000:
        sim.advance(25, step=25)
    assert served(sim, consumer) == [[job.id]]
    assert sim.now - t <= 2 * BCAST_MIN_DELAY + 100  # the second broadcast, 4 s after the first
    assert job.id not in sim.nodes[0].jobs  # at most once: moved, not copied
    assert sim.nodes[1].queues.get(b"q").fed.sources() == (sim.nodes[0].my_id,)
    assert any(type(m) is messages.YourJobs for _, _, m in sim.delivered)


def test_jobs_imported_from_the_bus_reach_a_blocked_client_at_once_not_at_the_next_tick():
    sim = mesh()
    consumer = object()
    block(sim, 1, consumer)
    job = add(sim, 0)
    a = sim.nodes[0]
    a.set_time(sim.now)
    a.federation.on_needjobs(sim.nodes[1].my_id, messages.NeedJobs(b"q", 1))  # as B's NEEDJOBS would
    sim._drain(0)
    sim.pump()  # YOURJOBS lands on B: no tick, no time passes
    assert served(sim, consumer) == [[job.id]]


def test_sustained_cross_node_traffic_no_duplicates_no_losses():
    sim = mesh()
    made, got = [], []
    for step in range(400):  # 10 s: a job every 25 ms on A, B consumes
        made.append(add(sim, 0, body=b"%d" % step).id)
        b = sim.nodes[1]
        b.set_time(sim.now)
        got.extend(j.id for j in b.getjob.get_jobs([b"q"], 10))
        sim._drain(1)
        sim.pump()
        sim.advance(25, step=25)
    for _ in range(200):
        b = sim.nodes[1]
        b.set_time(sim.now)
        got.extend(j.id for j in b.getjob.get_jobs([b"q"], 10))
        sim._drain(1)
        sim.pump()
        sim.advance(25, step=25)
    leftover = [j.id for j in sim.nodes[0].queues.get(b"q").jobs] if sim.nodes[0].queues.get(b"q") else []
    assert len(got) == len(set(got))  # at most once: no duplicate
    assert sorted(got + leftover) == sorted(made)  # nothing lost
    assert len(got) > 0.8 * len(made)  # and B was fed, not starved
    assert sim.nodes[1].queues.get(b"q").fed.import_rate(sim.now) >= 0
    # The moves are counted where they left and where they arrived, and
    # add up: every job out of A was moved to B, every job into B came from A.
    qa, qb = sim.nodes[0].queues.get(b"q"), sim.nodes[1].queues.get(b"q")
    assert qa.moved_out == qa.jobs_out == qb.moved_in == qb.jobs_in == len(got)
    assert qa.moved_in == qb.moved_out == 0
    assert sim.nodes[0].federation.moved_out == sim.nodes[1].federation.moved_in == len(got)


def test_a_queue_paused_in_output_is_not_a_source():
    sim = mesh()
    sim.nodes[0].set_time(sim.now)
    sim.nodes[0].queues.set_pause(b"q", PAUSED_OUT, True)
    add(sim, 0)
    consumer = object()
    block(sim, 1, consumer)
    sim.advance(10000)
    assert served(sim, consumer) == []
    assert not any(type(m) is messages.YourJobs for _, _, m in sim.delivered)


def test_a_leaving_node_never_asks():
    sim = mesh()
    sim.call(1, "cluster.set_leaving", True)
    add(sim, 0)
    sim.nodes[1].set_time(sim.now)
    sim.nodes[1].getjob.get_jobs([b"q"], 1)
    sim.advance(5000)
    assert not any(type(m) is messages.NeedJobs and a == 1 for a, _, m in sim.delivered)


def test_at_least_once_jobs_keep_a_copy_at_the_source_and_copies_postpone():
    sim = mesh()
    job = add(sim, 0, repl=3, retry=5)
    consumer = object()
    block(sim, 1, consumer)
    sim.advance(2500, step=25)
    assert served(sim, consumer) == [[job.id]]
    src = sim.nodes[0].jobs.get(job.id)
    assert src is not None and src.state == ACTIVE
    # B queued it on import and told the copies (QUEUED, no counter bumped).
    assert any(type(m) is messages.Queued and m.counter == messages.COUNT_NONE for _, _, m in sim.delivered)
    assert all(n.jobs.get(job.id).deliv == 0 for n in sim.nodes)


def load_eager_example():
    """The third-party-style policy of examples/, path-loaded as its users would."""
    import importlib
    import os
    import sys

    from tests.support.process import ROOT
    sys.path.insert(0, os.path.join(ROOT, "examples", "federation-eager"))
    try:
        return importlib.import_module("eager_federation")
    finally:
        sys.path.pop(0)


def load_eager_dropin():
    """The example's dropin module, loaded from its file (twisted.plugins'
    search path is fixed when it is first imported)."""
    import importlib.util
    import os

    from tests.support.process import ROOT
    path = os.path.join(ROOT, "examples", "federation-eager", "twisted", "plugins", "eager_federation_plugin.py")
    spec = importlib.util.spec_from_file_location("eager_federation_plugin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_third_party_policy_plugs_into_the_in_memory_cluster():
    eager_module = load_eager_example()
    eager = load_eager_dropin().eager
    assert verifyObject(IFederationPolicyFactory, eager)
    policy = eager.make("interval=50", None)
    assert isinstance(policy, eager_module.EagerPolicy) and policy.interval == 50
    assert verifyObject(IFederationPolicy, policy)
    sim = mesh(policy=lambda: eager.make("interval=50", None))
    consumer = object()
    block(sim, 1, consumer)
    job = add(sim, 0)
    t = sim.now
    while not served(sim, consumer) and sim.now - t < 2000:
        sim.advance(10, step=10)
    assert served(sim, consumer) == [[job.id]] and sim.now - t <= 150  # cron (100 ms) + interval, not 2 s


def test_no_jobs_are_sent_without_a_link_to_the_requester():
    sim = mesh()
    job = add(sim, 0)
    a, b = sim.nodes[0], sim.nodes[1]
    a.cluster.nodes[b.my_id].connected = False  # our link to B just dropped
    a.set_time(sim.now)
    a.bus_receive(b.cluster.header(), messages.NeedJobs(b"q", 5), None)
    sim._drain(0)
    assert job.id in a.jobs and a.jobs.get(job.id).state == QUEUED
    assert not any(type(m) is messages.YourJobs for _, _, m in sim.delivered)
    a.cluster.nodes[b.my_id].connected = True
    a.bus_receive(b.cluster.header(), messages.NeedJobs(b"q", 5), None)
    sim._drain(0)
    sim.pump()
    assert job.id not in a.jobs and b.queues.get(b"q").jobs[0].id == job.id


def test_the_example_policy_gives_at_most_half_a_queue_per_request():
    EagerPolicy = load_eager_example().EagerPolicy
    sim = mesh(policy=EagerPolicy)
    for i in range(5):
        add(sim, 0, body=b"%d" % i)
    a, b = sim.nodes[0], sim.nodes[1]
    a.set_time(sim.now)
    a.bus_receive(b.cluster.header(), messages.NeedJobs(b"q", 10), None)
    sim._drain(0)
    sim.pump()
    assert len(a.queues.get(b"q").jobs) == 2 and len(b.queues.get(b"q").jobs) == 3


# -- YOURJOBS past the memory limit ------------------------------------------------------

def asked_then_full(sim, consumer, level=1):
    """Node 1 blocks a consumer on q and asks for jobs; before the answers
    come, its memory passes 75% of maxmemory (level ``level``)."""
    b = sim.nodes[1]
    b.set_time(sim.now)
    assert b.getjob.get_jobs([b"q"], 1) == []
    b.getjob.block(consumer, [b"q"], 0, lambda jobs: [j.id for j in jobs], None)
    sim._drain(1)  # NEEDJOBS on the wire, not delivered yet
    b.memory.level = level


def test_jobs_handed_to_a_node_past_maxmemory_stay_with_the_sender_and_come_once_memory_frees():
    sim = mesh(2)
    a, b = sim.nodes
    once = add(sim, 0, body=b"at-least-once", retry=5)
    at_most_once = add(sim, 0, body=b"at-most-once", retry=0)
    consumer = object()
    asked_then_full(sim, consumer)
    sim.pump()  # NEEDJOBS to A, YOURJOBS to B, B hands them back
    assert any(type(m) is messages.YourJobs and s == 0 for s, _, m in sim.delivered)
    assert len(b.jobs) == 0 and served(sim, consumer) == []
    # Both are queued on A again at once: the at-least-once one by ENQUEUE
    # (A kept its copy), the at-most-once one taken back (its only copy).
    assert [j.id for j in a.queues.get(b"q").jobs] == [once.id, at_most_once.id]
    assert any(type(m) is messages.Enqueue and (s, r) == (1, 0) for s, r, m in sim.delivered)
    sim.advance(5000)
    assert served(sim, consumer) == [] and len(b.jobs) == 0  # still full: B does not ask
    b.memory.level = 0
    t = sim.now
    while len(served(sim, consumer)) < 1 and sim.now - t < 35_000:
        sim.advance(100)
    got = served(sim, consumer)[0]
    t = sim.now
    while len(got) < 2 and sim.now - t < 35_000:  # the other one follows (B asks again)
        b.set_time(sim.now)
        got += [j.id for j in b.getjob.get_jobs([b"q"], 1)]
        sim._drain(1)
        sim.advance(100)
    assert sorted(got) == sorted([once.id, at_most_once.id])  # each delivered once, none lost


def test_a_sender_past_maxmemory_too_takes_its_at_most_once_jobs_back():
    """No ping-pong between two full nodes: the record goes there and back,
    and the sender forgets what it handed away after RETURN_WINDOW_MS."""
    sim = mesh(2)
    a, b = sim.nodes
    job = add(sim, 0, retry=0)
    asked_then_full(sim, object(), level=3)
    a.memory.level = 3
    sim.pump()
    assert [(s, r) for s, r, m in sim.delivered if type(m) is messages.YourJobs] == [(0, 1), (1, 0)]
    assert [j.id for j in a.queues.get(b"q").jobs] == [job.id] and len(b.jobs) == 0
    a.memory.level = b.memory.level = 0
    a.set_time(sim.now)
    a.federation.on_needjobs(b.my_id, messages.NeedJobs(b"q", 1))
    assert job.id in a.federation._handed  # white box: remembered ...
    sim.advance(RETURN_WINDOW_MS + 1000)
    assert a.federation._handed == {}  # ... for a while only


def test_jobs_a_peer_sends_unasked_to_a_node_past_maxmemory_go_back_to_it():
    sim = mesh(2)
    a, b = sim.nodes
    b.memory.level = 3
    maker = NodeState(a.my_id, sim.now, rng=random.Random(1))  # A's jobs, unknown to A itself
    rec = maker.jobs.record(maker.addjob.add(b"q", b"x" * 1000, 1, 0, 0, 600, 0, False))
    b.set_time(sim.now)
    b.bus_receive(a.cluster.header(), messages.YourJobs((rec,)), None)
    sim._drain(1)
    sim.pump()
    assert len(b.jobs) == 0 and b.memory.used() == 0
    assert [j.id for j in a.queues.get(b"q").jobs] == [rec.id]  # A has room: it keeps what it sent
