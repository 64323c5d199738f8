"""ADDJOB ... DEDUP <key>: the pure index, the command on one node in
memory, the key on replicas and in the AOF record format, the bus format
across versions, and an invariant checked with hypothesis."""

import pytest
from hypothesis import given, settings, strategies as st

from disque.bus import wire
from disque.core.job import (
    ACKED, ACTIVE, BadRecord, Job, WAIT_REPL, deserialize, serialize
)
from disque.core import messages
from disque.core.dedup import DedupIndex
from disque.testing import SimCluster
from tests.support.memory import cmd, connect, make_runtime, take
from tests.support.sim import replies


class _J:
    def __init__(self, job_id, queue=b"q", dedup=b"k"):
        self.id = job_id
        self.queue = queue
        self.dedup = dedup


# -- the index -------------------------------------------------------------

def test_index_live_then_remembered_for_the_window_then_forgotten():
    idx = DedupIndex(window_ms=1000)
    a = _J(b"A" * 40)
    idx.add(a)
    assert idx.find(b"q", b"k", 0) is a
    assert idx.find(b"other", b"k", 0) is None  # keys are per queue
    idx.remove(a, 100, remember=True)
    assert idx.find(b"q", b"k", 1099) == a.id
    idx.expire(1099)
    assert idx.find(b"q", b"k", 1099) == a.id
    idx.expire(1100)
    assert idx.find(b"q", b"k", 1100) is None and not idx.gone


def test_index_first_job_keeps_the_key_and_unaccepted_jobs_leave_no_trace():
    idx = DedupIndex(window_ms=1000)
    a, b = _J(b"A" * 40), _J(b"B" * 40)
    idx.add(a)
    idx.add(b)  # a copy of another node's job with the same key
    assert idx.find(b"q", b"k", 0) is a
    idx.remove(b, 0, remember=True)  # not the indexed one: no effect
    assert idx.find(b"q", b"k", 0) is a
    idx.remove(a, 0, remember=False)
    assert idx.find(b"q", b"k", 0) is None


def test_index_window_change_applies_to_remembered_keys():
    idx = DedupIndex(window_ms=10_000)
    idx.add(_J(b"A" * 40))
    idx.remove(idx.live[(b"q", b"k")], 0, remember=True)
    idx.window = 500
    assert idx.find(b"q", b"k", 600) is None
    idx.expire(600)
    assert not idx.gone and not idx._expiry


def test_index_forget_oldest():
    idx = DedupIndex(window_ms=10_000)
    for n in range(5):
        j = _J(bytes([65 + n]) * 40, dedup=b"k%d" % n)
        idx.add(j)
        idx.remove(j, n, remember=True)
    assert idx.forget_oldest(2) == 2
    assert idx.find(b"q", b"k0", 10) is None and idx.find(b"q", b"k1", 10) is None
    assert idx.find(b"q", b"k2", 10) == b"C" * 40


# -- the command on one node (RESP in memory, fake clock) -----------------------

def _addjob(proto, tr, *args):
    proto.dataReceived(cmd("ADDJOB", *args))
    return take(tr)


def test_addjob_dedup_returns_the_existing_id_and_adds_nothing():
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    first = _addjob(proto, tr, "q", "body", 0, "DEDUP", "row-1")
    assert first.startswith(b"+D-")
    assert _addjob(proto, tr, "q", "other body", 0, "DEDUP", "row-1", "TTL", "10") == first
    assert _addjob(proto, tr, "q", "body", 0, "dedup", "row-2") != first
    assert _addjob(proto, tr, "q2", "body", 0, "DEDUP", "row-1") != first  # another queue
    proto.dataReceived(cmd("QLEN", "q"))
    assert take(tr) == b":2\r\n"


def test_a_retry_after_the_job_was_acked_is_answered_for_the_window_only():
    runtime, clock = make_runtime(**{"dedup-window": "5"})
    proto, tr = connect(runtime)
    first = _addjob(proto, tr, "q", "body", 0, "DEDUP", "k")
    proto.dataReceived(cmd("GETJOB", "FROM", "q") + cmd("ACKJOB", first[1:-2]))
    take(tr)
    assert runtime.node.jobs.get(first[1:-2]) is None  # a single node collects at once
    assert _addjob(proto, tr, "q", "body", 0, "DEDUP", "k") == first
    proto.dataReceived(cmd("QLEN", "q"))
    assert take(tr) == b":0\r\n"
    clock.advance(5.1)
    runtime.tick()
    assert not runtime.node.jobs.dedup.gone
    again = _addjob(proto, tr, "q", "body", 0, "DEDUP", "k")
    assert again.startswith(b"+D-") and again != first


def test_dedup_answers_before_the_queue_state_is_checked():
    """A retry of an ADDJOB that succeeded succeeds, even if the queue is
    paused or full by now; a new key gets the refusal."""
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    first = _addjob(proto, tr, "q", "body", 0, "DEDUP", "k")
    proto.dataReceived(cmd("PAUSE", "q", "in"))
    take(tr)
    assert _addjob(proto, tr, "q", "body", 0, "DEDUP", "k", "MAXLEN", "1") == first
    assert _addjob(proto, tr, "q", "body", 0, "DEDUP", "new").startswith(b"-PAUSED")


def test_dedup_argument_errors():
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    assert _addjob(proto, tr, "q", "body", 0, "DEDUP", "") == \
        b"-ERR DEDUP key must be between 1 and 1024 bytes\r\n"
    assert _addjob(proto, tr, "q", "body", 0, "DEDUP", "x" * 1025) == \
        b"-ERR DEDUP key must be between 1 and 1024 bytes\r\n"
    assert _addjob(proto, tr, "q", "body", 0, "DEDUP") == b"-ERR syntax error\r\n"
    assert _addjob(proto, tr, "q", "body", 0, "DEDUP", "k", "REPLICATE", "0") == \
        b"-ERR REPLICATE must be between 1 and 65535\r\n"
    proto.dataReceived(cmd("QLEN", "q"))
    assert take(tr) == b":0\r\n"


def test_show_reports_the_key_and_is_unchanged_without_one():
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    keyed = _addjob(proto, tr, "q", "body", 0, "DEDUP", "my key")[1:-2]
    plain = _addjob(proto, tr, "q", "body", 0)[1:-2]
    proto.dataReceived(cmd("SHOW", keyed))
    reply = take(tr)
    assert reply.startswith(b"*32\r\n") and reply.endswith(b"$4\r\nbody\r\n$4\r\nbody\r\n$5\r\ndedup\r\n$6\r\nmy key\r\n")
    proto.dataReceived(cmd("SHOW", plain))
    reply = take(tr)
    assert reply.startswith(b"*30\r\n") and reply.endswith(b"$4\r\nbody\r\n$4\r\nbody\r\n")


def test_config_set_dedup_window():
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("CONFIG", "GET", "dedup-window"))
    assert take(tr) == b"*2\r\n$12\r\ndedup-window\r\n$3\r\n600\r\n"
    proto.dataReceived(cmd("CONFIG", "SET", "dedup-window", "30"))
    assert take(tr) == b"+OK\r\n"
    runtime.tick()
    assert runtime.node.jobs.dedup.window == 30_000
    proto.dataReceived(cmd("CONFIG", "SET", "dedup-window", "-1"))
    assert take(tr).startswith(b"-ERR")


# -- the key on replicas (pure cores wired in memory) --------------------------

def _cluster(n):
    sim = SimCluster(n)
    sim.chain_meet()
    sim.settle(3000)
    return sim


def _add(sim, i, key, queue=b"q", repl=3, timeout=0):
    """What the ADDJOB command does with a key, on node ``i``: the existing
    job's outcome, or a new job.  Returns (job or id, reply handle)."""
    node = sim.nodes[i]
    node.set_time(sim.now)
    handle = object()
    found = node.addjob.find_dedup(queue, key)
    if found is not None:
        if type(found) is not bytes and found.state == WAIT_REPL:
            node.addjob.await_replication(found, handle, timeout, b"OK", b"NOREPL")
            sim._drain(i)
            sim.pump()
        return found, handle
    job = node.addjob.add(queue, b"body", repl, 0, -1, 3600, 0, False, key)
    if job.state == WAIT_REPL:
        node.addjob.await_replication(job, handle, timeout, b"OK", b"NOREPL")
    sim._drain(i)
    sim.pump()
    return job, handle


def test_the_key_travels_to_the_replicas_and_survives_the_creator():
    sim = _cluster(3)
    job, h = _add(sim, 0, b"k")
    assert replies(sim, h) == [b"OK"]
    for i in (1, 2):
        copy = sim.nodes[i].jobs.get(job.id)
        assert copy.dedup == b"k"
        assert sim.nodes[i].addjob.find_dedup(b"q", b"k") is copy
    sim.kill(0)
    again, _ = _add(sim, 1, b"k")
    assert again.id == job.id
    assert sum(len(n.jobs) for i, n in enumerate(sim.nodes) if sim.alive[i]) == 2


def test_a_failed_replication_leaves_the_key_free_everywhere():
    """NOREPL: the job was never accepted.  Neither the creator nor a node
    that got a copy may remember the key, or the producer's retry would
    be answered with the ID of a job that does not exist."""
    sim = _cluster(3)
    sim.partition([0, 1], [2])
    job, h = _add(sim, 0, b"k", repl=3, timeout=300)
    assert sim.nodes[1].jobs.get(job.id) is not None  # node 1 took a copy
    sim.advance(400)
    assert replies(sim, h) == [b"NOREPL"]
    for i in (0, 1):
        assert job.id not in sim.nodes[i].jobs
        assert sim.nodes[i].addjob.find_dedup(b"q", b"k") is None
    sim.heal()
    sim.settle(3000)
    retry, h2 = _add(sim, 1, b"k", timeout=1000)
    assert replies(sim, h2) == [b"OK"] and retry.id != job.id


def test_a_repeated_addjob_waits_for_the_first_ones_outcome():
    sim = _cluster(3)
    sim.partition([0, 1], [2])
    job, h1 = _add(sim, 0, b"k", repl=3, timeout=2000)
    same, h2 = _add(sim, 0, b"k", repl=3, timeout=10)
    assert same is job and replies(sim, h1) == replies(sim, h2) == []
    sim.heal()
    sim.advance(1500)
    assert replies(sim, h1) == replies(sim, h2) == [b"OK"]

    sim.partition([0, 1], [2])
    job, h1 = _add(sim, 0, b"k2", repl=3, timeout=300)
    _, h2 = _add(sim, 0, b"k2", repl=3)
    sim.advance(400)
    assert replies(sim, h1) == replies(sim, h2) == [b"NOREPL"]


def test_acked_and_collected_everywhere_still_answers_on_every_copy():
    sim = _cluster(3)
    job, _ = _add(sim, 0, b"k")
    sim.call(0, "acks.ack_jobs", [job.id])
    sim.advance(3000)
    assert all(job.id not in n.jobs for n in sim.nodes)
    for node in sim.nodes:
        assert node.addjob.find_dedup(b"q", b"k") == job.id


# -- formats -----------------------------------------------------------------

def test_storage_record_keeps_the_key_and_keyless_records_stay_version_1():
    job = Job(b"D-" + b"x" * 38, b"q", b"body", ACTIVE, 3, 5, 6, 0, 10, 7)
    plain = serialize(job)
    assert plain[0] == 1 and deserialize(plain).dedup is None
    job.dedup = b"key"
    keyed = serialize(job)
    assert keyed[0] == 2 and keyed.endswith(b"\x00\x03key")
    back = deserialize(keyed)
    assert back.dedup == b"key" and back.body == b"body"
    with pytest.raises(BadRecord):
        deserialize(keyed[:-1])


def test_loaded_jobs_answer_their_keys_deleted_ones_do_not():
    from disque.core.node import NodeState
    node = NodeState(b"a" * 40)
    job = Job(b"D-" + b"x" * 38, b"q", b"body", ACTIVE, 1, 5, 10 ** 9, 0, 10, 7)
    job.dedup = b"key"
    node.jobs.load(deserialize(serialize(job)))
    assert node.addjob.find_dedup(b"q", b"key").id == job.id
    node.jobs.load_delete(job.id)
    assert node.addjob.find_dedup(b"q", b"key") is None


def _header():
    return messages.Header(b"n" * 40, b"127.0.0.1", 7711, 0)


def test_bus_version_1_frames_still_decode():
    rec = messages.JobRecord(b"i" * 40, b"q", b"body", 3, 1, 2, 0, 10, 0, 0, (b"n" * 40,))
    v2 = wire.encode(_header(), messages.ReplJob(rec), 2)  # as written to a node of the previous version
    assert v2[2] == 2 and v2.endswith(b"\x00\x00")  # an empty key
    v1 = v2[:2] + b"\x01" + v2[3:-2]
    assert wire.decode(v1) == (_header(), messages.ReplJob(rec))
    d2 = wire.encode(_header(), messages.DelJob(b"i" * 40, True))
    assert wire.decode(d2)[1] == messages.DelJob(b"i" * 40, True)
    d1 = d2[:2] + b"\x01" + d2[3:-1]
    assert wire.decode(d1)[1] == messages.DelJob(b"i" * 40, False)
    with pytest.raises(wire.WireError):
        wire.decode(v2[:2] + b"\x01" + v2[3:])  # a v2 body under a v1 header: trailing bytes


# -- invariant ---------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.sampled_from([b"q1", b"q2"]), st.sampled_from([b"a", b"b", b"c"])),
    st.tuples(st.just("ack"), st.integers(0, 50)),
    st.tuples(st.just("wait"), st.integers(1, 4000)),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(OPS)
def test_one_key_one_job_while_remembered(ops):
    """On one node, for every (queue, key): at most one job holds it, and
    every ADDJOB with the key answers the same ID from the first one until
    the key is forgotten (job gone and the window passed)."""
    runtime, clock = make_runtime(**{"dedup-window": "3"})
    proto, tr = connect(runtime)
    first = {}  # pair -> (id, time its job left or None)
    ids = []
    for op in ops:
        now = runtime.node.now
        if op[0] == "add":
            _, queue, key = op
            reply = _addjob(proto, tr, queue, b"x", 0, "DEDUP", key)
            assert reply.startswith(b"+D-")
            job_id = reply[1:-2]
            pair = (queue, key)
            if pair in first:
                old_id, left = first[pair]
                if left is None or now < left + 3000:
                    assert job_id == old_id
            if pair not in first or first[pair][0] != job_id:
                first[pair] = (job_id, None)
                ids.append(job_id)
        elif op[0] == "ack" and ids:
            job_id = ids[op[1] % len(ids)]
            proto.dataReceived(cmd("ACKJOB", job_id))
            take(tr)
            for pair, (fid, left) in first.items():
                if fid == job_id and left is None:
                    first[pair] = (fid, now)
        elif op[0] == "wait":
            clock.advance(op[1] / 1000.0)
            runtime.tick()
        holders = {}
        for job in runtime.node.jobs.values():
            if job.dedup is not None and job.state != ACKED:
                pair = (job.queue, job.dedup)
                assert pair not in holders, "two jobs hold %r" % (pair,)
                holders[pair] = job
