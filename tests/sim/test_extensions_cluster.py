"""NACK DELAY, BACKOFF, dead letters and priorities (docs/extensions.md) on
simulated clusters with the fake clock: every copy honours a delay, a dead
letter is made once, nodes of the previous version get nothing they cannot
read; and hypothesis invariants over random work with kills."""

import os

import pytest
from hypothesis import example, given, settings, strategies as st

from disque.core import messages
from disque.core.deadletter import dead_letter_id
from disque.core.errors import CommandError
from disque.core.job import ACKED, F_NACK_DELAYED, WAIT_REPL
from disque.core.options import make as make_options
from tests.support.sim import cluster, holders, queued_on, sent


def addjob(sim, i, opts=None, queue=b"q", repl=3, retry=2, ttl=3600):
    node = sim.nodes[i]
    node.set_time(sim.now)
    job = node.addjob.add(queue, b"body", repl, 0, retry, ttl, 0, False, None, opts)
    if job.state == WAIT_REPL:
        node.addjob.await_replication(job, object(), 0, b"OK", b"NOREPL")
    sim._drain(i)
    sim.pump()
    return job


def deliver(sim, i, queue=b"q"):
    return [j.id for j in sim.call(i, "getjob.get_jobs", [queue], 10)]


def copy(sim, i, job_id):
    return sim.nodes[i].jobs.get(job_id)


def as_previous_version(sim, i):
    """Node ``i`` stops announcing H_EXTENSIONS, as a node of the previous
    version (which reads bus version 2 only) does."""
    view = sim.nodes[i].cluster
    header = view.header
    view.header = lambda: header()._replace(flags=header().flags & ~messages.H_EXTENSIONS)
    sim.settle(2000)  # its next frames tell the others


# -- NACK DELAY on every copy -----------------------------------------------------------

def test_every_copy_waits_for_the_delay_even_when_the_nacking_node_dies():
    sim = cluster(3)
    job = addjob(sim, 0)
    assert deliver(sim, 0) == [job.id]
    until = sim.now + 5000
    assert sim.call(0, "requeue.nack_jobs", [job.id], 5000) == 1
    nackdelays = sent(sim, messages.NackDelay)
    assert sorted((a, b) for a, b, m in nackdelays if m.count) == [(0, 1), (0, 2)]
    # each copy passes the NACK on to the copies it knows, as a repeat (for
    # a node it handed the job to that the NACKing node does not know)
    assert sorted((a, b) for a, b, m in nackdelays if not m.count) == [(1, 2), (2, 1)]
    for i in (1, 2):
        c = copy(sim, i, job.id)
        assert c.nacks == 1 and c.qtime >= until + 2000  # RETRY past the delay: a backup only
    sim.kill(0)
    sim.advance(6900, step=50)
    assert queued_on(sim, job.id) == []
    sim.advance(1000, step=50)
    assert len(queued_on(sim, job.id)) == 1  # at least once: a copy takes over
    assert all(copy(sim, i, job.id).nacks == 1 for i in (1, 2))


def test_a_copy_handed_on_that_the_nacking_node_never_knew_waits_for_the_delay():
    """Node 1 hands its job to node 0 (YOURJOBS) and dies before telling
    node 2 anything but node 0's QUEUED; node 2 takes a delayed NACK."""
    sim = cluster(3, seed=1)
    job = addjob(sim, 1, repl=2, retry=1, ttl=600)
    assert sorted(holders(sim, job.id)) == [1, 2]
    assert deliver(sim, 0) == []  # NEEDJOBS: node 1 answers with the job
    assert queued_on(sim, job.id) == [0]
    sim.kill(1)
    until = sim.now + 500
    assert sim.call(2, "requeue.nack_jobs", [job.id], 500) == 1
    assert queued_on(sim, job.id) == []  # node 0 heard of the delay
    assert copy(sim, 0, job.id).qtime >= until + 1000  # RETRY past it: a backup only
    sim.advance(450, step=50)
    assert queued_on(sim, job.id) == []
    sim.advance(100, step=50)
    assert queued_on(sim, job.id) == [2]


def test_a_queued_crossing_a_delayed_nack_is_answered_with_the_delay():
    sim = cluster(3)
    job = addjob(sim, 0, retry=3)
    deliver(sim, 0)
    sim.call(0, "requeue.nack_jobs", [job.id], 2000)
    # Node 1 queues its copy anyway (as if our NACKDELAY had crossed it).
    node1 = sim.nodes[1]
    node1.set_time(sim.now)
    node1.queues.enqueue(copy(sim, 1, job.id))
    sim._drain(1)
    sim.pump()
    assert queued_on(sim, job.id) == []  # told of the delay, it stood down
    sim.advance(2100, step=50)
    assert queued_on(sim, job.id) == [0]


def test_the_nacking_node_requeues_at_its_time_and_the_copies_stand_down():
    sim = cluster(3)
    job = addjob(sim, 0, retry=3)
    deliver(sim, 0)
    sim.call(0, "requeue.nack_jobs", [job.id], 2000)
    sim.advance(1900, step=50)
    assert queued_on(sim, job.id) == []
    sim.advance(200, step=50)
    assert queued_on(sim, job.id) == [0]
    counters = [m.counter for _, _, m in sent(sim, messages.Queued)]
    assert counters == [messages.COUNT_NONE] * 2  # the NACK was counted once, by NACKDELAY
    assert [copy(sim, i, job.id).nacks for i in range(3)] == [1, 1, 1]
    assert all(copy(sim, i, job.id).deliv == 0 for i in range(3))


def test_a_copy_that_missed_the_nackdelay_hears_it_in_answer_to_its_willqueue():
    sim = cluster(3)
    job = addjob(sim, 0, retry=5)
    deliver(sim, 0)
    sim.partition((0, 1), (2,))
    until = sim.now + 20000
    sim.call(0, "requeue.nack_jobs", [job.id], 20000)
    sim.heal()
    assert copy(sim, 2, job.id).nacks == 0  # it missed it
    sim.advance(8000, step=50)  # its own requeue time came: WILLQUEUE first
    assert [(b, m.count) for _, b, m in sent(sim, messages.NackDelay)] == [(1, True), (2, False)]
    assert copy(sim, 2, job.id).qtime >= until and copy(sim, 2, job.id).nacks == 0
    sim.advance(11000, step=50)
    assert queued_on(sim, job.id) == []  # nobody before the time
    sim.advance(1500, step=50)
    assert queued_on(sim, job.id) == [0]


def test_backoff_drives_a_nack_without_delay_on_every_copy():
    sim = cluster(3)
    job = addjob(sim, 1, make_options(backoff=1000, backoff_max=1000), retry=10)
    assert deliver(sim, 1) == [job.id]
    sim.call(1, "requeue.nack_jobs", [job.id], None)
    delayed = copy(sim, 1, job.id)
    assert delayed.flags & F_NACK_DELAYED and 800 <= delayed.qtime - sim.now <= 1000
    assert all(copy(sim, i, job.id).qtime > delayed.qtime for i in (0, 2))


# -- Dead letters ------------------------------------------------------------------------

def test_a_dead_letter_is_made_once_when_every_copy_decides_at_the_same_time():
    """RETRY 1, MAXDELIVERIES 1, delivered and never acknowledged: each of
    the three copies reaches its requeue time within the spread and decides
    alone.  They make the same job, and the QUEUED tie break leaves it
    queued on one node; the original is gone everywhere."""
    sim = cluster(3)
    job = addjob(sim, 0, make_options(max_deliveries=1), retry=1)
    deliver(sim, 0)
    sim.advance(3000, step=50)
    dead = dead_letter_id(job.id)
    assert sorted(holders(sim, dead)) == [0, 1, 2]
    assert len(queued_on(sim, dead)) == 1
    assert sum(n.dead_letters.moved for n in sim.nodes) >= 1
    sim.advance(3000)
    assert holders(sim, job.id) == []
    shown = copy(sim, queued_on(sim, dead)[0], dead)
    assert shown.queue == b"q:dead" and shown.opts.dead_from == b"q" and shown.deliv >= 1


@pytest.mark.parametrize("deciders", [(1, 2), (0, 1, 2), (2, 0)])
def test_nodes_deciding_at_the_same_moment_make_one_dead_letter_queued_once(deciders):
    """The copies' messages cross: each decider made the dead letter before
    hearing of the others'.  The same ID everywhere, queued on one node
    (the QUEUED tie break), the original acknowledged everywhere."""
    sim = cluster(3)
    job = addjob(sim, 0, make_options(max_deliveries=1), retry=60)
    deliver(sim, 0)
    for i in deciders:  # each requeues it (as its RETRY timer would) before any message moves
        node = sim.nodes[i]
        node.set_time(sim.now)
        assert node.queues.enqueue(node.jobs.get(job.id))
        sim._drain(i)
    sim.pump()
    dead = dead_letter_id(job.id)
    assert [sim.nodes[i].dead_letters.moved for i in deciders] == [1] * len(deciders)
    assert sorted(holders(sim, dead)) == [0, 1, 2]
    assert len(queued_on(sim, dead)) == 1
    assert all(copy(sim, i, job.id) is None or copy(sim, i, job.id).state == ACKED for i in range(3))
    sim.advance(3000)
    assert holders(sim, job.id) == [] and len(queued_on(sim, dead)) == 1


def test_a_dead_letter_survives_the_death_of_the_node_holding_it_queued():
    sim = cluster(3)
    job = addjob(sim, 0, make_options(max_deliveries=1), retry=2)
    deliver(sim, 0)
    sim.call(0, "requeue.nack_jobs", [job.id], None)
    dead = dead_letter_id(job.id)
    assert queued_on(sim, dead) == [0] and sorted(holders(sim, dead)) == [0, 1, 2]
    sim.kill(0)
    sim.advance(3000, step=50)
    assert len(queued_on(sim, dead)) == 1
    assert holders(sim, job.id) == []  # the SETACK reached the copies before the kill


# -- Nodes of the previous version ------------------------------------------------------

def test_jobs_with_options_and_delays_stay_off_nodes_of_the_previous_version():
    sim = cluster(3)
    as_previous_version(sim, 2)
    view = sim.nodes[0].cluster
    assert {n.id: n.extensions for n in view.peers()} == {sim.nodes[1].my_id: True, sim.nodes[2].my_id: False}
    opts = make_options(priority=8)
    with pytest.raises(CommandError) as e:
        addjob(sim, 0, opts, repl=3)
    assert b"support job options" in e.value.message
    job = addjob(sim, 0, opts, repl=2)
    assert sorted(holders(sim, job.id)) == [0, 1]
    plain = addjob(sim, 0, repl=3)
    assert sorted(holders(sim, plain.id)) == [0, 1, 2]  # the original's jobs go everywhere
    deliver(sim, 0)
    with pytest.raises(CommandError) as e:
        sim.call(0, "requeue.nack_jobs", [plain.id], 1000)
    assert b"older version" in e.value.message and copy(sim, 0, plain.id).nacks == 0
    assert sim.call(0, "requeue.nack_jobs", [job.id], 1000) == 1
    assert all(b != 2 for _, b, _ in sent(sim, messages.NackDelay))
    # Federation: node 2 asks for jobs of the queue; the optioned one (first
    # in line: PRIORITY 8) stays, the plain one behind it moves.
    only_opts = addjob(sim, 1, opts, queue=b"f", repl=1)
    behind = addjob(sim, 1, queue=b"f", repl=1)
    sim.call(2, "federation.need_jobs", b"f", "waiting")  # discovery: one job from each peer
    assert holders(sim, only_opts.id) == [1] and queued_on(sim, only_opts.id) == [1]
    assert queued_on(sim, behind.id) == [2]


# -- Invariants ---------------------------------------------------------------------------

OPTION = st.one_of(st.none(), st.builds(
    lambda p, b, m: make_options(priority=p, backoff=b, backoff_max=b * 4, max_deliveries=m),
    st.integers(1, 9), st.sampled_from([0, 0, 300, 1500]), st.sampled_from([0, 1, 2, 3])))
OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 2), OPTION, st.integers(1, 3)),
    st.tuples(st.just("get"), st.integers(0, 2), st.none(), st.just(0)),
    st.tuples(st.just("nack"), st.integers(0, 2), st.sampled_from([None, 0, 500, 2500]), st.integers(0, 30)),
    st.tuples(st.just("ack"), st.integers(0, 2), st.none(), st.integers(0, 30)),
    st.tuples(st.just("wait"), st.integers(50, 3000), st.none(), st.just(0)),
    st.tuples(st.just("kill"), st.integers(0, 2), st.none(), st.just(0)),
), max_size=40)


@settings(max_examples=int(os.environ.get("DISQUE_EXAMPLES", 40)), deadline=None)
@given(OPS, st.integers(0, 1000))
# Found by this test: node 1 hands its job to node 2, which hands it on to
# node 0; node 1's delayed NACK reached node 2 only, and node 0 served the
# job before its time (NACKDELAY is now passed on by the copies).
@example([("add", 1, None, 1), ("get", 2, None, 0), ("wait", 50, None, 0), ("wait", 1951, None, 0),
          ("wait", 3000, None, 0), ("get", 0, None, 0), ("nack", 1, 500, 0)], 0)
# Found by this test: node 1 hands its job to node 0 (YOURJOBS) and dies;
# node 2, which never heard that node 0 holds a copy, takes a delayed NACK,
# and node 0 kept the job queued (a QUEUED now names its sender as a copy,
# and is answered with the NACKDELAY while the delay runs).
@example([("add", 1, None, 2), ("get", 0, None, 0), ("kill", 1, None, 0), ("nack", 2, 500, 0)], 1)
def test_extension_invariants(ops, seed):
    """On every node, at every step: a job is never delivered before the
    time a delayed NACK set (NACKDELAY reached its copies: no partitions
    here, kills only); a job that became a dead letter is never delivered
    again; queues serve by priority then creation; a job (dead letters
    included) is queued on at most one node."""
    sim = cluster(3, seed=seed)
    made, not_before, dead = [], {}, set()
    killed = False
    for op, a, arg, b in ops:
        if not sim.alive[a % 3] and op != "wait":
            continue
        if op == "add":
            try:
                made.append(addjob(sim, a, arg, repl=b, retry=1, ttl=600).id)
            except CommandError:
                pass
        elif op == "get":
            for job in sim.call(a, "getjob.get_jobs", [b"q"], 2):
                assert sim.now >= not_before.get(job.id, 0), "delivered before its delay"
                assert job.id not in dead, "a dead letter's original delivered again"
        elif op == "nack" and made:
            job_id = made[b % len(made)]
            if sim.call(a, "requeue.nack_jobs", [job_id], arg):
                job = copy(sim, a, job_id)
                delayed = job is not None and job.flags & F_NACK_DELAYED
                not_before[job_id] = job.qtime if delayed else sim.now
        elif op == "ack" and made:
            sim.call(a, "acks.ack_jobs", [made[b % len(made)]])
        elif op == "wait":
            sim.advance(a, step=50)
        elif op == "kill" and not killed:
            sim.kill(a)
            killed = True
        for i, node in enumerate(sim.nodes):
            if not sim.alive[i]:
                continue
            for job in node.jobs.values():
                if job.opts is not None and job.opts.dead_from:
                    dead.add(job.dedup)  # a dead letter's DEDUP key is its original's ID
            for q in node.queues.values():
                jobs = list(q.jobs)
                assert jobs == sorted(jobs, key=lambda j: (-j.priority, j.ctime))
                for job in jobs:
                    assert job.id not in dead, "a dead letter's original queued again"
                    assert sim.now >= not_before.get(job.id, 0), "queued before its delay"
        for job_id in dead:  # (NACKs here only go to originals: the original's own rule)
            assert len(queued_on(sim, dead_letter_id(job_id))) <= 1
