"""The job messages of the Disque state machine on pure cores wired in
memory (SimCluster): REPLJOB/GOTJOB, ENQUEUE, WILLQUEUE/QUEUED, WORKING,
SETACK/GOTACK/DELJOB, PAUSE, with failures and partitions."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from disque.core.job import ACKED, QUEUED, STATE_NAMES, WAIT_REPL
from disque.core import messages
from disque.core.errors import CommandError
from tests.support.sim import cluster, holders, queued_on, replies, sent


def addjob(sim, i, queue=b"q", body=b"body", repl=3, retry=-1, ttl=3600, delay=0, timeout=0, async_=False):
    node = sim.nodes[i]
    node.set_time(sim.now)
    job = node.addjob.add(queue, body, repl, delay, retry, ttl, 0, async_)
    handle = object()
    if job.state == WAIT_REPL and not async_:
        node.addjob.await_replication(job, handle, timeout, b"OK", b"NOREPL")
    sim._drain(i)
    sim.pump()
    return job, handle


# -- replication -------------------------------------------------------------

def test_show_lists_the_copies_confirmed_while_a_job_waits_for_the_others():
    """SHOW's nodes-confirmed while the job waits: the nodes that answered
    GOTJOB so far (kept by the replication, the job keeps its queue's
    shared record); once confirmed, none (nothing left to wait for)."""
    from disque.commands.views import job_fields

    sim = cluster(3)
    sim.partition([0, 1], [2])
    job, h = addjob(sim, 0)
    node = sim.nodes[0]
    assert job.state == WAIT_REPL and replies(sim, h) == []
    assert dict(job_fields(node, job))[b"nodes-confirmed"] == (sim.nodes[1].my_id,)
    assert job.extra.shared
    sim.heal()
    sim.advance(200)  # the 50 ms replication step sends the REPLJOB again
    assert replies(sim, h) == [b"OK"] and job.state != WAIT_REPL
    assert dict(job_fields(node, job))[b"nodes-confirmed"] == ()
    assert job.extra.shared

def test_replicate_3_on_3_nodes():
    sim = cluster(3)
    job, h = addjob(sim, 0)
    assert replies(sim, h) == [b"OK"]
    assert holders(sim, job.id) == [0, 1, 2]
    assert queued_on(sim, job.id) == [0]  # queued where it was added, active elsewhere
    for n in sim.nodes:
        copy = n.jobs.get(job.id)
        assert set(copy.delivered) == {x.my_id for x in sim.nodes}
        assert copy.confirmed is None
        assert copy.extra.shared  # every copy, the creator's included, back on its queue's shared record
    assert len(sent(sim, messages.ReplJob)) == 2 and len(sent(sim, messages.GotJob)) == 2


def test_replicate_2_on_5_nodes_makes_exactly_2_copies():
    sim = cluster(5)
    job, h = addjob(sim, 2, repl=2)
    assert replies(sim, h) == [b"OK"]
    assert len(holders(sim, job.id)) == 2 and 2 in holders(sim, job.id)


def test_default_replication_level_is_capped_by_the_cluster():
    sim = cluster(2)
    with pytest.raises(CommandError) as e:
        addjob(sim, 0, repl=3)
    assert e.value.code == b"NOREPL"


def test_a_silent_target_gets_replaced_every_50_ms():
    sim = cluster(4)
    sim.partition({0, 1, 2}, {1, 2, 3})  # 0 cannot reach 3, not yet detected
    assert sim.nodes[0].cluster.reachable == 3
    for _ in range(10):  # whichever targets were picked, it completes
        job, h = addjob(sim, 0, repl=3)
        sim.advance(200, step=10)
        assert replies(sim, h) == [b"OK"]
        assert sorted(holders(sim, job.id)) == [0, 1, 2]


def test_replication_timeout_gives_norepl_and_deletes_copies():
    sim = cluster(3)
    sim.partition({0, 1}, {2})
    job, h = addjob(sim, 0, repl=3, timeout=300)
    assert replies(sim, h) == []
    assert holders(sim, job.id) == [0, 1] and sim.nodes[0].jobs.get(job.id).state == WAIT_REPL
    sim.advance(400, step=10)
    assert replies(sim, h) == [b"NOREPL"]
    assert holders(sim, job.id) == []  # DELJOB reached node 1
    assert any(type(m) is messages.DelJob and m.job_id == job.id for _, _, m in sim.delivered)


def test_not_enough_reachable_nodes_is_refused_at_once():
    sim = cluster(3, node_timeout=1000)
    sim.kill(2)
    sim.advance(3000)
    with pytest.raises(CommandError) as e:
        addjob(sim, 0, repl=3)
    assert e.value.code == b"NOREPL" and b"reachable" in e.value.message


def test_async_replies_at_once_and_replicates_in_background():
    sim = cluster(3)
    sim.partition({0}, {1, 2})
    job, h = addjob(sim, 0, repl=3, async_=True)
    assert queued_on(sim, job.id) == [0] and holders(sim, job.id) == [0]
    sim.heal()
    sim.advance(200, step=10)
    assert holders(sim, job.id) == [0, 1, 2]
    assert queued_on(sim, job.id) == [0]


def test_duplicate_repljob_merges_delivered_lists():
    sim = cluster(3)
    job, _ = addjob(sim, 0, repl=2)
    other = [i for i in holders(sim, job.id) if i != 0][0]
    rec = sim.nodes[0].jobs.record(sim.nodes[0].jobs.get(job.id))
    extra = b"f" * 40
    rec = rec._replace(delivered=(*rec.delivered, extra))
    sim.nodes[other].bus_receive(sim.nodes[0].cluster.header(), messages.ReplJob(rec), None)
    assert extra in sim.nodes[other].jobs.get(job.id).delivered


# -- re-queueing -----------------------------------------------------------------

def test_requeue_after_retry_sends_willqueue_and_queued_and_counts_deliveries():
    sim = cluster(3)
    job, _ = addjob(sim, 0, retry=2)
    node = sim.nodes[0]
    node.set_time(sim.now)
    assert node.getjob.get_jobs([b"q"], 1)[0].id == job.id  # delivered, never acked
    sim.advance(3000, step=50)
    assert sent(sim, messages.WillQueue) and sent(sim, messages.Queued)
    assert len(queued_on(sim, job.id)) == 1  # by whichever copy's timer fired first
    for n in sim.nodes:
        assert n.jobs.get(job.id).deliv == 1


def test_requeue_on_another_node_when_the_creator_dies():
    sim = cluster(3, node_timeout=1000)
    job, _ = addjob(sim, 0, retry=2)
    sim.nodes[0].set_time(sim.now)
    sim.nodes[0].getjob.get_jobs([b"q"], 1)
    sim.kill(0)
    sim.advance(4000, step=50)
    assert len(queued_on(sim, job.id)) == 1  # one of the survivors, not both


def test_queued_dedup_dequeues_on_the_node_with_the_smaller_id():
    sim = cluster(2)
    job, _ = addjob(sim, 0, repl=2, retry=5)
    a, b = sim.nodes
    for n in (a, b):
        n.set_time(sim.now)
        j = n.jobs.get(job.id)
        if j.state != QUEUED:
            n.queues.enqueue(j)
    assert queued_on(sim, job.id) == [0, 1]
    sim.outbound  # both queued it "at the same time"; now QUEUED crosses
    lo, hi = sorted((0, 1), key=lambda i: sim.nodes[i].my_id)
    sim.nodes[lo].bus_receive(sim.nodes[hi].cluster.header(), messages.Queued(job.id, messages.COUNT_DELIVERY), None)
    sim.nodes[hi].bus_receive(sim.nodes[lo].cluster.header(), messages.Queued(job.id, messages.COUNT_DELIVERY), None)
    assert queued_on(sim, job.id) == [hi]


def test_willqueue_for_an_acked_job_answers_setack():
    sim = cluster(2)
    job, _ = addjob(sim, 0, repl=2)
    sim.partition({0}, {1})
    sim.call(0, "acks.ack_jobs", [job.id])
    before = len(sent(sim, messages.SetAck))
    sim.heal()
    sim.nodes[0].bus_receive(sim.nodes[1].cluster.header(), messages.WillQueue(job.id), None)
    sim._drain(0)
    sim.pump()
    assert len(sent(sim, messages.SetAck)) > before


def test_nack_propagates_as_queued_with_the_nack_flag():
    sim = cluster(3)
    job, _ = addjob(sim, 0)
    sim.nodes[0].set_time(sim.now)
    sim.nodes[0].getjob.get_jobs([b"q"], 1)
    assert sim.call(0, "requeue.nack_jobs", [job.id]) == 1
    assert [m.counter for _, _, m in sent(sim, messages.Queued)] == [messages.COUNT_NACK, messages.COUNT_NACK]
    assert all(n.jobs.get(job.id).nacks == 1 for n in sim.nodes)
    assert queued_on(sim, job.id) == [0]


def test_working_postpones_the_requeue_on_every_copy():
    sim = cluster(3)
    job, _ = addjob(sim, 0, retry=10)
    sim.advance(4000)
    before = [n.jobs.get(job.id).qtime for n in sim.nodes[1:]]
    assert sim.call(0, "requeue.working", job.id) == 10
    after = [n.jobs.get(job.id).qtime for n in sim.nodes[1:]]
    assert all(a > b for a, b in zip(after, before))
    assert len(sent(sim, messages.Working)) == 2


# -- ACKs and garbage collection ----------------------------------------------------

def test_ack_on_a_copy_garbage_collects_everywhere():
    sim = cluster(3)
    job, _ = addjob(sim, 0)
    assert sim.call(1, "acks.ack_jobs", [job.id]) == 1
    assert holders(sim, job.id) == []
    assert sent(sim, messages.SetAck) and sent(sim, messages.GotAck) and sent(sim, messages.DelJob)


def test_ack_of_an_unknown_at_least_once_id_makes_a_dummy_ack_that_finds_the_job():
    sim = cluster(3)
    job, _ = addjob(sim, 0, repl=2)
    outsider = [i for i in range(3) if i not in holders(sim, job.id)][0]
    assert sim.call(outsider, "acks.ack_jobs", [job.id]) == 0
    assert holders(sim, job.id) == []
    assert any(m.may_have == 0 for _, _, m in sent(sim, messages.SetAck))


def test_no_dummy_ack_for_at_most_once_ids_or_when_leaving():
    sim = cluster(3)
    job, _ = addjob(sim, 0, repl=1, retry=0)
    assert job.id[-1:] in b"02468ace"
    sim.call(1, "acks.ack_jobs", [job.id])
    assert job.id not in sim.nodes[1].jobs and not sent(sim, messages.SetAck)
    job2, _ = addjob(sim, 0, repl=1)
    sim.call(1, "cluster.set_leaving", True)
    sim.call(1, "acks.ack_jobs", [job2.id])
    assert job2.id not in sim.nodes[1].jobs and not sent(sim, messages.SetAck)


def test_a_dummy_ack_nobody_knows_is_dropped_once_everybody_answered():
    sim = cluster(3)
    fake = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"
    sim.call(0, "acks.ack_jobs", [fake])
    assert holders(sim, fake) == []


def test_ack_while_an_owner_is_down_then_gc_after_it_returns():
    sim = cluster(3, node_timeout=1000)
    job, _ = addjob(sim, 0)
    sim.kill(2)
    sim.call(0, "acks.ack_jobs", [job.id])
    sim.advance(2000)
    assert sorted(holders(sim, job.id)) == [0, 1]
    assert all(sim.nodes[i].jobs.get(job.id).state == ACKED for i in (0, 1))
    sim.revive(2)
    sim.advance(70000, step=500)  # GC retries with backoff reach it
    assert holders(sim, job.id) == []


def test_fastack_deletes_every_copy():
    sim = cluster(3)
    job, _ = addjob(sim, 0)
    assert sim.call(2, "acks.fast_ack", [job.id]) == 1
    assert holders(sim, job.id) == []


def test_an_acked_job_is_never_requeued():
    sim = cluster(3, node_timeout=1000)
    job, _ = addjob(sim, 0, retry=1)
    sim.kill(2)
    sim.call(0, "acks.ack_jobs", [job.id])
    sim.advance(10000, step=100)
    for i in (0, 1):
        j = sim.nodes[i].jobs.get(job.id)
        assert j is None or j.state == ACKED


# -- PAUSE bcast and leaving ----------------------------------------------------------

def test_pause_bcast_reaches_every_reachable_node():
    from disque.core.queue import PAUSED_IN
    sim = cluster(3)
    sim.nodes[0].set_time(sim.now)
    flags = sim.nodes[0].queues.set_pause(b"pq", PAUSED_IN, True)
    sim.call(0, "queues.broadcast_pause", b"pq", flags)
    for n in sim.nodes:
        assert n.queues.get(b"pq").flags == PAUSED_IN


def test_no_new_copies_on_a_leaving_node():
    sim = cluster(3)
    sim.call(2, "cluster.set_leaving", True)
    sim.advance(1500)
    with pytest.raises(CommandError):
        addjob(sim, 0, repl=3)
    job, h = addjob(sim, 0, repl=2)
    assert 2 not in holders(sim, job.id)


def test_a_leaving_node_replicates_only_to_others():
    sim = cluster(3)
    sim.call(2, "cluster.set_leaving", True)
    job, h = addjob(sim, 2, repl=2)
    assert replies(sim, h) == [b"OK"]
    assert sorted(holders(sim, job.id)) == [0, 1]
    assert len(queued_on(sim, job.id)) == 1
    with pytest.raises(CommandError) as e:
        addjob(sim, 2, repl=3)
    assert b"leaving" in e.value.message


# -- invariants ----------------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3), st.integers(1, 3)),
    st.tuples(st.just("get"), st.integers(0, 3), st.just(0)),
    st.tuples(st.just("ack"), st.integers(0, 3), st.integers(0, 50)),
    st.tuples(st.just("wait"), st.integers(50, 3000), st.just(0)),
), max_size=40)


@settings(max_examples=int(os.environ.get("DISQUE_EXAMPLES", 40)), deadline=None)
@given(OPS, st.integers(0, 1000))
def test_healthy_cluster_invariants(ops, seed):
    """In a healthy cluster: a job is queued on at most one node, an acked
    job is never queued again, every ACKed job is eventually gone."""
    sim = cluster(4, seed=seed)
    made, acked = [], set()
    for op, a, b in ops:
        if op == "add":
            made.append(addjob(sim, a, repl=b, retry=1, ttl=600)[0].id)
        elif op == "get":
            sim.nodes[a].set_time(sim.now)
            sim.nodes[a].getjob.get_jobs([b"q"], 1)
        elif op == "ack" and made:
            job_id = made[b % len(made)]
            sim.call(a, "acks.ack_jobs", [job_id])
            acked.add(job_id)
        elif op == "wait":
            sim.advance(a, step=50)
        for job_id in made:
            assert len(queued_on(sim, job_id)) <= 1
        for job_id in acked:
            assert queued_on(sim, job_id) == []
        for node in sim.nodes:  # the counts /metrics reads, against a scan
            counts = dict.fromkeys(("wait-repl", "active", "queued", "acked"), 0)
            for job in node.jobs.values():
                counts[STATE_NAMES[job.state].decode()] += 1
            assert node.job_states() == counts
    sim.advance(5000)
    for job_id in acked:
        assert holders(sim, job_id) == []
