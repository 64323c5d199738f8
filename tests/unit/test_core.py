"""The pure state machine, driven with an integer clock (no reactor)."""

import random
from binascii import a2b_base64

import pytest

from disque.core.job import ACKED, ACTIVE, F_DELIVERED, Job, QUEUED, WAIT_REPL
from disque.core.effects import Reply
from disque.core.jobid import POOL, JobIdGenerator, is_at_most_once, is_valid, ttl_minutes, ttl_suffix
from disque.core.errors import CommandError
from disque.core.node import NodeState
from disque.core.queue import PAUSED_IN, PAUSED_OUT

NODE_ID = b"33f36033a560e0980d7d71c8fc8c0db81156cc5e"
T0 = 1_795_347_500_000


def make_node(now=T0):
    return NodeState(NODE_ID, now, rng=random.Random(7))


def add(node, queue=b"q", body=b"b", repl=1, delay=0, retry=-1, ttl=86400, maxlen=0):
    return node.addjob.add(queue, body, repl, delay, retry, ttl, maxlen, False)


def advance(node, ms):
    node.set_time(node.now + ms)
    node.tick()


# -- job IDs ------------------------------------------------------------------

@pytest.mark.parametrize("ttl,retry,suffix", [
    (60, 0, b"-0000"), (60, 5, b"-0001"), (61, 0, b"-0000"), (120, 0, b"-0002"),
    (120, 5, b"-0003"), (1, 0, b"-0000"), (1, 1, b"-0001"), (3600, 300, b"-003d"),
    (3600, 0, b"-003c"), (86400, 300, b"-05a1"), (86400, 0, b"-05a0"),
    (3932100, 0, b"-fffe"), (3932100, 5, b"-ffff"), (10000000, 300, b"-ffff"),
    (100000000, 0, b"-fffe"),
])
def test_ttl_suffix_matches_original_table(ttl, retry, suffix):
    assert ttl_suffix(ttl, retry) == suffix


def test_new_ids_are_well_formed_unique_and_carry_node_prefix():
    node = make_node()
    ids = {add(node, ttl=3600, retry=10).id for _ in range(1000)}
    assert len(ids) == 1000
    for job_id in ids:
        assert is_valid(job_id) and len(job_id) == 40
        assert job_id.startswith(b"D-33f36033-")
        assert ttl_minutes(job_id) == 61 and not is_at_most_once(job_id)


def test_pooled_ids_are_the_seeded_bits_in_order_with_each_jobs_suffix():
    """new_id() hands out a draw of POOL x 144 bits encoded at once: the
    random parts, end to end, are exactly that draw, across refills, and
    each ID carries the suffix of its own TTL and RETRY."""
    gen = JobIdGenerator(NODE_ID, seed=b"s" * 20)
    bits = random.Random(b"s" * 20).getrandbits
    shapes = [(60, 0), (3600, 300), (86400, 0), (3932100, 5), (1, 1)]
    ids = [gen.new_id(*shapes[i % len(shapes)]) for i in range(2 * POOL + 3)]
    assert b"".join(a2b_base64(i[11:35]) for i in ids[:2 * POOL]) == \
        bits(144 * POOL).to_bytes(18 * POOL, "big") + bits(144 * POOL).to_bytes(18 * POOL, "big")
    for n, job_id in enumerate(ids):
        assert is_valid(job_id) and job_id.startswith(b"D-33f36033-")
        assert job_id[35:] == ttl_suffix(*shapes[n % len(shapes)])


def test_invalid_ids():
    for bad in (b"", b"foo", b"D-1234", b"D-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", b"X" * 40):
        assert not is_valid(bad)


# -- ADDJOB ----------------------------------------------------------------------

def test_addjob_queues_and_defaults():
    node = make_node()
    job = add(node)
    assert job.state == QUEUED and job.retry == 300 and job.repl == 1
    assert job.delivered == (NODE_ID,)
    assert len(node.queues.get(b"q")) == 1
    # requeue time = now + retry + jitter in [0, 500)
    assert 300_000 <= job.qtime - T0 < 300_500
    # awake 500 ms before the requeue (WILLQUEUE)
    assert job.awake == job.qtime - 500


@pytest.mark.parametrize("ttl,expected", [(5, 1), (100, 10), (86400, 300), (3000, 300), (9, 1)])
def test_default_retry(ttl, expected):
    assert add(make_node(), ttl=ttl).retry == expected


def test_ctime_is_strictly_increasing_within_a_millisecond():
    node = make_node()
    a, b, c = add(node), add(node), add(node)
    assert a.ctime == T0 * 1_000_000 and b.ctime == a.ctime + 1 and c.ctime == b.ctime + 1


def test_addjob_errors():
    node = make_node()
    with pytest.raises(CommandError) as e:
        add(node, repl=2, retry=0)
    assert e.value.message.startswith(b"With RETRY set to 0")
    with pytest.raises(CommandError) as e:
        add(node, delay=10, ttl=10)
    assert e.value.message.startswith(b"The specified DELAY is greater than TTL")
    with pytest.raises(CommandError) as e:
        add(node, repl=2)
    assert e.value.code == b"NOREPL"


def test_maxlen_and_pause_in():
    node = make_node()
    add(node, queue=b"m")
    add(node, queue=b"m")
    add(node, queue=b"m", maxlen=3)
    with pytest.raises(CommandError) as e:
        add(node, queue=b"m", maxlen=3)
    assert e.value.code == b"MAXLEN"
    add(node, queue=b"new", maxlen=1)
    node.queues.set_pause(b"p", PAUSED_IN, True)
    with pytest.raises(CommandError) as e:
        add(node, queue=b"p")
    assert e.value.code == b"PAUSED"


def test_leaving_single_node_refuses_jobs():
    node = make_node()
    node.cluster.set_leaving(True)
    with pytest.raises(CommandError) as e:
        add(node)
    assert e.value.code == b"NOREPL" and b"I'm leaving the cluster" in e.value.message


# -- GETJOB ----------------------------------------------------------------------

def test_getjob_order_and_round_robin():
    node = make_node()
    a1, a2 = add(node, b"ga"), add(node, b"ga")
    c1 = add(node, b"gc")
    got = node.getjob.get_jobs([b"gz", b"ga", b"gc", b"gb"], 10)
    assert got == [a1, c1, a2]
    for j in got:
        assert j.state == ACTIVE and j.flags & F_DELIVERED
    q = node.queues.get(b"ga")
    assert q.jobs_in == 2 and q.jobs_out == 2


def test_paused_out_queue_is_not_served():
    node = make_node()
    add(node, b"p")
    node.queues.set_pause(b"p", PAUSED_OUT, True)
    assert node.getjob.get_jobs([b"p"], 1) == []
    node.queues.set_pause(b"p", 0, True)
    assert len(node.getjob.get_jobs([b"p"], 1)) == 1


def test_blocked_clients_served_fifo_one_job_each():
    node = make_node()
    node.getjob.block("c1", [b"q"], 0, lambda jobs: ("c1", jobs), None)
    node.getjob.block("c2", [b"q", b"other"], 0, lambda jobs: ("c2", jobs), None)
    j1, j2, j3 = add(node), add(node), add(node)
    node.getjob.serve_ready()
    replies = [e for e in node.outbox if isinstance(e, Reply)]
    assert [r.payload for r in replies] == [("c1", [j1]), ("c2", [j2])]
    assert len(node.getjob) == 0
    assert len(node.queues.get(b"q")) == 1 and j3.state == QUEUED
    assert node.queues.get(b"other").waiting is None


def test_blocked_client_times_out():
    node = make_node()
    node.getjob.block("c", [b"q"], 100, lambda jobs: jobs, "TIMEOUT")
    # A lower bound, exact once within one schedule window of the deadline.
    assert T0 < node.next_deadline() <= T0 + 100
    advance(node, 99)
    assert node.outbox == []
    advance(node, 1)
    assert node.outbox == [Reply("c", "TIMEOUT")]
    assert len(node.getjob) == 0


def test_unblock_on_disconnect():
    node = make_node()
    node.getjob.block("c", [b"q"], 0, lambda jobs: jobs, None)
    assert node.getjob.unblock("c")
    add(node)
    node.getjob.serve_ready()
    assert node.outbox == [] and len(node.queues.get(b"q")) == 1


def test_leaving_releases_blocked_clients():
    node = make_node()
    node.getjob.block("c", [b"q"], 0, lambda jobs: jobs, None)
    node.cluster.set_leaving(True)
    node.getjob.unblock_all_with("LEAVING")
    assert node.outbox == [Reply("c", "LEAVING")]


# -- requeue, delay, TTL -----------------------------------------------------------

def test_requeue_after_retry_counts_additional_delivery():
    node = make_node()
    job = add(node, retry=10, ttl=3600)
    assert node.getjob.get_jobs([b"q"], 1) == [job]
    advance(node, 9_000)
    assert job.state == ACTIVE
    advance(node, 1_600)  # past retry + max jitter
    assert job.state == QUEUED and job.deliv == 1
    assert node.getjob.get_jobs([b"q"], 1) == [job]


def test_retry_zero_job_is_never_requeued():
    node = make_node()
    job = add(node, retry=0, ttl=100)
    assert job.qtime == 0
    node.getjob.get_jobs([b"q"], 1)
    for _ in range(60):
        advance(node, 1000)
    assert job.state == ACTIVE
    assert node.requeue.nack_jobs([job.id]) == 0  # delivered at-most-once job


def test_delayed_job_is_queued_after_delay():
    node = make_node()
    job = add(node, delay=5, ttl=100)
    assert job.state == ACTIVE and job.qtime == T0 + 5000
    advance(node, 4990)
    assert job.state == ACTIVE
    advance(node, 20)
    assert job.state == QUEUED and job.deliv == 0


def test_ttl_wins_whatever_the_state():
    node = make_node()
    queued = add(node, ttl=2)
    active = add(node, ttl=2, retry=1)
    node.getjob.get_jobs([b"q"], 1)
    delayed = add(node, ttl=3, delay=2)
    advance(node, 2000)
    assert queued.id not in node.jobs and active.id not in node.jobs
    assert node.jobs.get(delayed.id) is delayed
    advance(node, 1000)
    assert len(node.jobs) == 0 and len(node.schedule) == 0


def test_paused_in_queue_postpones_requeue():
    node = make_node()
    job = add(node, retry=1, ttl=100)
    node.getjob.get_jobs([b"q"], 1)
    node.queues.set_pause(b"q", PAUSED_IN, True)
    advance(node, 1600)
    assert job.state == ACTIVE and job.qtime > node.now
    node.queues.set_pause(b"q", 0, True)
    advance(node, 1600)
    assert job.state == QUEUED


# -- ACK / FASTACK / DELJOB / NACK / WORKING ----------------------------------------

def test_ack_deletes_on_single_node_and_counts_known():
    node = make_node()
    a, b = add(node), add(node)
    unknown = b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"
    assert node.acks.ack_jobs([a.id, unknown, b.id]) == 2
    assert len(node.jobs) == 0 and len(node.queues.get(b"q")) == 0
    assert node.acks.ack_jobs([a.id]) == 0
    # a single node never keeps dummy ACKs
    assert node.jobs.get(unknown) is None


def test_fastack_and_deljob():
    node = make_node()
    a, b = add(node), add(node)
    assert node.acks.fast_ack([a.id, a.id]) == 1
    assert node.acks.delete_jobs([b.id, b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001"]) == 1
    assert len(node.jobs) == 0


def test_nack_and_enqueue_counters():
    node = make_node()
    job = add(node)
    assert node.requeue.nack_jobs([job.id]) == 0  # already queued
    node.getjob.get_jobs([b"q"], 1)
    assert node.requeue.nack_jobs([job.id]) == 1
    assert job.nacks == 1 and job.deliv == 0
    node.getjob.get_jobs([b"q"], 1)
    assert node.requeue.enqueue_jobs([job.id]) == 1
    assert job.nacks == 1 and job.deliv == 1


def test_dequeue_enqueue_keeps_creation_order():
    node = make_node()
    a, b, c = add(node), add(node), add(node)
    assert node.requeue.dequeue_jobs([a.id]) == 1
    assert list(node.queues.get(b"q").jobs) == [b, c]
    assert node.requeue.enqueue_jobs([a.id]) == 1
    assert list(node.queues.get(b"q").jobs) == [a, b, c]


def test_working_postpones_and_dequeues():
    node = make_node()
    job = add(node, retry=45)
    assert node.requeue.working(job.id) == 45
    assert job.state == ACTIVE and len(node.queues.get(b"q")) == 0
    assert 45_000 <= job.qtime - node.now < 45_500
    with pytest.raises(CommandError) as e:
        node.requeue.working(b"D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-0001")
    assert e.value.code == b"NOJOB"


def test_working_refused_after_half_ttl():
    node = make_node()
    job = add(node, ttl=2, retry=1)
    advance(node, 1001)
    with pytest.raises(CommandError) as e:
        node.requeue.working(job.id)
    assert e.value.code == b"TOOLATE"


# -- queues -------------------------------------------------------------------------

def test_idle_empty_queues_are_reclaimed_but_not_paused_ones():
    node = make_node()
    job = add(node, b"gone")
    node.getjob.get_jobs([b"gone"], 1)
    node.acks.ack_jobs([job.id])
    node.queues.set_pause(b"kept", PAUSED_IN, True)
    advance(node, 299_000)
    assert node.queues.get(b"gone") is not None
    advance(node, 2_000)
    assert node.queues.get(b"gone") is None
    assert node.queues.get(b"kept") is not None


def test_flush_all_keeps_blocked_clients_waiting():
    node = make_node()
    add(node)
    node.getjob.block("c", [b"w"], 0, lambda jobs: jobs, None)
    node.flush_all()
    assert len(node.jobs) == 0 and len(node.schedule) == 0
    job = add(node, b"w")
    node.getjob.serve_ready()
    assert node.outbox == [Reply("c", [job])]


# -- what a job costs in memory ----------------------------------------------

def test_a_plain_job_stays_on_its_queues_shared_record_through_its_life():
    """ADDJOB, GETJOB, ACKJOB of a job without DELAY, DEDUP or NACKs on a
    single node never gives it a JobExtra of its own: it shares its
    queue's, which holds the queue name."""
    node = make_node()
    job, other = add(node), add(node)
    shared = node.queues.get(b"q").job_defaults
    assert job.extra is other.extra is shared and shared.shared and job.queue is shared.queue == b"q"
    assert node.getjob.get_jobs([b"q"], 1) == [job]
    assert job.extra is shared
    node.acks.acknowledge(job)
    assert job.extra is shared and job.state == ACKED
    node.acks.ack_jobs([job.id])
    assert node.jobs.get(job.id) is None and job.extra is shared and shared.at_defaults()


def test_extra_fields_read_and_write_as_attributes():
    node = make_node()
    shared = node.queues.job_defaults(b"q", 1, 10)
    job = Job(b"D-" + b"x" * 38, shared.queue, b"b", ACTIVE, 1, 5, 6, 0, 10, 7, shared)
    assert (job.queue, job.repl, job.retry, job.delay, job.nacks, job.deliv, job.gc_retry, job.confirmed,
            job.dedup) == (b"q", 1, 10, 0, 0, 0, 0, None, None)
    job.nacks = 0
    job.confirmed = None
    assert job.extra is shared  # writing a default makes no copy
    job.nacks += 1
    assert job.extra is not shared and not job.extra.shared and job.nacks == 1
    assert (job.queue, job.repl, job.retry) == (b"q", 1, 10)
    assert shared.nacks == 0 and shared.at_defaults()
    job.dedup = b"k"
    assert (job.nacks, job.dedup, job.delay) == (1, b"k", 0)
    assert add(node, delay=5).extra is not shared  # DELAY: a record of its own
    alone = Job(b"D-" + b"y" * 38, b"r", b"b", ACTIVE, 2, 5, 6, 3, 10, 7)
    assert (alone.delay, alone.queue, alone.repl, alone.retry) == (3, b"r", 2, 10) and not alone.extra.shared


def test_queues_come_and_go_their_jobs_keep_one_shared_record():
    node = make_node()
    job = add(node)
    shared = job.extra
    assert shared.shared and node.queues.job_defaults(b"q", 1, job.retry) is shared
    assert node.getjob.get_jobs([b"q"], 1) == [job]  # ACTIVE, out of its queue
    q = node.queues.get(b"q")
    node.queues.drop_unused()
    assert node.queues.get(b"q") is None  # the empty queue is dropped, the job waits
    assert node.queues.job_defaults(b"q", 1, job.retry) is shared  # the job keeps it alive
    assert add(node).extra is shared and node.queues.get(b"q") is not q


def test_copies_of_a_queue_this_node_lacks_share_one_record_kept_alive_by_them_only():
    """A replica's copies (no queue of theirs here) get one shared record
    per (queue, REPLICATE, RETRY, options), asked job after job: the
    lookup remembers the last one, without keeping it alive."""
    import gc

    node = make_node()
    first = node.queues.job_defaults(b"elsewhere", 3, 60)
    assert node.queues.get(b"elsewhere") is None
    assert node.queues.job_defaults(b"elsewhere", 3, 60) is first
    other = node.queues.job_defaults(b"elsewhere", 3, 61)
    assert other is not first and node.queues.job_defaults(b"elsewhere", 3, 61) is other
    assert node.queues.job_defaults(b"elsewhere", 3, 60) is first
    del first, other
    gc.collect()
    assert len(node.queues._job_defaults) == 0  # nothing kept them
    again = node.queues.job_defaults(b"elsewhere", 3, 60)
    assert again.shared and (again.queue, again.repl, again.retry) == (b"elsewhere", 3, 60)
    assert node.queues._job_defaults.get((b"elsewhere", 3, 60, None)) is again


def test_working_on_a_job_in_a_delayed_nack_keeps_the_delay():
    """WORKING postpones a requeue to RETRY from now, but never before a
    delayed NACK's end, whether it is asked here or heard from a copy
    (found by TestNodeMachine: NACK DELAY 4 s, WORKING, the job queued at
    RETRY, 2.5 s in)."""
    from disque.core import messages

    for heard in (False, True):
        node = make_node()
        job = add(node, ttl=5)  # RETRY about 1 s
        assert node.getjob.get_jobs([b"q"], 1) == [job]
        assert node.requeue.nack_jobs([job.id], 4000) == 1
        end = node.now + 4000
        if heard:
            node.requeue.on_working(PEER, messages.Working(job.id))
        else:
            node.requeue.working(job.id)
        assert job.qtime == end
        for _ in range(39):  # until just before the delay's end: never queued
            advance(node, 100)
            while node.next_deadline() is not None and node.next_deadline() <= node.now:
                node.run_due()
            assert job.state == ACTIVE and node.getjob.get_jobs([b"q"], 1) == []
        advance(node, 200)
        while node.next_deadline() is not None and node.next_deadline() <= node.now:
            node.run_due()
        assert node.getjob.get_jobs([b"q"], 1) == [job]


def test_jobs_of_other_options_get_their_own_shared_record():
    node = make_node()
    a, b, c = add(node, retry=5), add(node, retry=5), add(node, retry=7)
    d, e = add(node, retry=5), add(node, ttl=3600)
    assert a.extra is b.extra is d.extra and a.extra is not c.extra and c.extra.shared
    assert (c.retry, e.retry, e.repl) == (7, 300, 1) and e.extra.shared and e.queue is a.queue


def test_jobs_of_one_millisecond_and_ttl_share_their_expire_time():
    node = make_node()
    a, b = add(node), add(node)
    c = add(node, ttl=3600)
    assert a.etime is b.etime and a.etime == T0 + 86400 * 1000
    assert c.etime == T0 + 3600 * 1000
    advance(node, 1)
    d = add(node)
    assert d.etime == a.etime + 1


@pytest.mark.parametrize("ttl,retry", [(86400, -1), (3600, 0), (10, 5), (2, 1), (100, 200), (600, -1)])
def test_addjob_fast_path_is_the_generic_enqueue(ttl, retry):
    """ADDJOB inlines ENQUEUE + awake-time for a new job: same result as the
    generic path (enqueue() on a registered WAIT_REPL job)."""
    fast, ref_node = make_node(), make_node()
    for n in (fast, ref_node):
        n.queues.get(b"q") or n.queues.queue_for(b"q")
    job = fast.addjob.add(b"q", b"x", 1, 0, retry, ttl, 0, False)
    ref = Job(job.id, b"q", b"x", WAIT_REPL, 1, job.ctime, job.etime, 0, job.retry,
              ref_node.now + job.retry * 1000)
    ref.delivered = job.delivered
    assert ref_node.jobs.add(ref)
    assert ref_node.queues.enqueue(ref)  # draws the same jitter from the same seeded rng
    for field in ("state", "flags", "qtime", "awake", "deliv", "nacks"):
        assert getattr(job, field) == getattr(ref, field), field
    assert job.awake <= job.etime
    assert len(fast.schedule) == len(ref_node.schedule) == 1
    assert fast.schedule.pop_due(job.awake) == [job]
    assert list(fast.queues.get(b"q").jobs) == [job]
    assert fast.queues.get(b"q").jobs_in == ref_node.queues.get(b"q").jobs_in == 1


# -- the queue's job list --------------------------------------------------------

def test_job_list_keeps_creation_order_like_a_sorted_list():
    """JobList against a plain list kept sorted by ctime (ties in arrival
    order), with small sublists so that splits, ties across sublists and
    empty sublists all happen."""
    from disque.core.queue import JobList

    class Item:  # compared by identity, as jobs are
        def __init__(self, ctime):
            self.ctime = ctime

    class SmallJobList(JobList):
        __slots__ = ()
        LOAD = 4

    rng = random.Random(3)
    jobs = SmallJobList()
    ref = []
    for step in range(3000):
        op = rng.random()
        if op < 0.55 or not ref:
            job = Item(rng.randrange(40) if rng.random() < 0.5 else 40 + step)
            jobs.add(job)
            pos = len([j for j in ref if j.ctime <= job.ctime])
            ref.insert(pos, job)
        elif op < 0.75:
            assert jobs.pop(0) is ref.pop(0)
        else:
            job = ref.pop(rng.randrange(len(ref)))
            jobs.remove(job)
        assert len(jobs) == len(ref) and list(jobs) == ref
        for sub, top in zip(jobs._lists, jobs._maxes):
            assert sub and len(sub) <= 2 * jobs.LOAD and sub[-1].ctime == top
        if ref:
            assert jobs[0] is ref[0] and jobs[-1] is ref[-1] and jobs[len(ref) // 2] is ref[len(ref) // 2]
            assert jobs.head(3) == ref[:3] and jobs.tail(3) == ref[::-1][:3]
    gone = Item(5)
    assert gone not in jobs
    with pytest.raises(ValueError):
        jobs.remove(gone)


# -- a restart: loaded jobs wait to hear from their other copies --------------

PEER = b"a" * 40


def restarted_node_with_a_loaded_copy(now=T0):
    """A node just restarted from its AOF: one peer from its node file (no
    link yet) and a RETRY 1 job both hold, whose requeue time is long past."""
    from disque.core import messages

    node = make_node(now)
    node.cluster.restore(False, [(PEER, b"127.0.0.1", 7712, False)], now)
    job = Job(b"D-" + b"1" * 36 + b"-0001", b"q", b"body", ACTIVE, 2, (now - 60_000) * 1_000_000,
              now + 3_600_000, 0, 1, now - 30_000)
    job.delivered = (NODE_ID, PEER)
    node.jobs.load(job)
    node.jobs.finish_load(False)
    node.outbox.clear()
    return node, job, messages


def sent(node, kind):
    return [e.message for e in node.outbox if type(getattr(e, "message", None)) is kind]


def test_a_loaded_job_waits_for_the_link_to_its_other_copy():
    node, job, messages = restarted_node_with_a_loaded_copy()
    for _ in range(10):
        advance(node, 100)
    assert job.state == ACTIVE and sent(node, messages.WillQueue) == []
    node.link_up(PEER)
    advance(node, 100)
    assert sent(node, messages.WillQueue) == [messages.WillQueue(job.id)]
    advance(node, 400)
    assert job.state == ACTIVE  # the answers have WILLQUEUE_ADVANCE to come
    advance(node, 200)
    assert job.state == QUEUED  # nobody answered: queued


def test_a_loaded_job_acknowledged_elsewhere_is_not_queued():
    node, job, messages = restarted_node_with_a_loaded_copy()
    node.link_up(PEER)
    advance(node, 100)
    assert sent(node, messages.WillQueue) == [messages.WillQueue(job.id)]
    assert job.state == ACTIVE  # not queued before the answer could come
    header = messages.Header(PEER, b"127.0.0.1", 7712, 0)
    node.bus_receive(header, messages.SetAck(job.id, 2), None)
    advance(node, 1000)
    assert node.jobs.get(job.id) is None or job.state == ACKED


def test_a_loaded_job_goes_on_once_its_other_copy_is_suspected():
    node, job, messages = restarted_node_with_a_loaded_copy()
    node.cluster.node_timeout = 1000
    for _ in range(30):  # no link ever: the peer is suspected after node_timeout
        advance(node, 100)
    assert node.cluster.nodes[PEER].pfail
    assert job.state == QUEUED


# -- YOURJOBS past the memory limit ---------------------------------------------------

def handed_over(*specs):
    """YOURJOBS records of new jobs made on PEER: (retry, body) each."""
    from disque.core import messages

    peer = NodeState(PEER, T0, rng=random.Random(5))
    return messages.YourJobs(tuple(peer.jobs.record(add(peer, body=body, retry=retry)) for retry, body in specs))


@pytest.mark.parametrize("level", [1, 2, 3])
def test_past_75_percent_of_maxmemory_yourjobs_registers_no_new_job_and_hands_them_back(level):
    """REPLJOB's rule: no new copy past 75%.  The at-least-once job's sender
    still holds its copy and is asked to queue it (ENQUEUE); the at-most-once
    record is the only copy, so it goes back in a YOURJOBS."""
    from disque.core import messages

    node = make_node()
    msg = handed_over((5, b"kept there"), (0, b"only copy"))
    at_least_once, at_most_once = msg.jobs
    node.memory.level = level
    node.federation.on_yourjobs(PEER, msg)
    assert len(node.jobs) == 0 and node.memory.used() == 0
    assert sent(node, messages.Enqueue) == [messages.Enqueue(at_least_once.id)]
    assert sent(node, messages.YourJobs) == [messages.YourJobs((at_most_once,))]
    node.outbox.clear()
    node.memory.level = 0  # memory freed: the same message is taken
    node.federation.on_yourjobs(PEER, msg)
    assert len(node.queues.get(b"q")) == 2 and sent(node, messages.YourJobs) == []


def test_past_the_memory_limit_a_job_already_held_is_still_queued():
    """A copy this node holds costs nothing more to queue."""
    node = make_node()
    job = add(node, retry=5)
    node.queues.dequeue(job)
    rec = node.jobs.record(job)
    node.memory.level = 3
    from disque.core import messages

    node.federation.on_yourjobs(PEER, messages.YourJobs((rec,)))
    assert job.state == QUEUED and sent(node, messages.Enqueue) == sent(node, messages.YourJobs) == []


def test_a_node_past_the_memory_limit_asks_for_no_jobs():
    from disque.core import messages
    from disque.federation.default import DefaultPolicy

    node = make_node()
    node.federation.policy = DefaultPolicy()
    node.cluster.restore(False, [(PEER, b"127.0.0.1", 7712, False)], T0)
    node.outbox.clear()
    node.memory.level = 1
    node.federation.need_jobs(b"q", "waiting")
    assert sent(node, messages.NeedJobs) == []
    node.memory.level = 0
    node.federation.need_jobs(b"q", "waiting")
    assert sent(node, messages.NeedJobs) == [messages.NeedJobs(b"q", 1)]


# -- a backlog of due jobs: at most max_due a run ----------------------------------

def restarted_node_with_overdue_jobs(n, now=T0):
    """A node just restarted from an AOF of ``n`` RETRY 30 jobs created two
    minutes ago, one copy each (their requeue time passed 90 s ago), and
    how many jobs each of its runs processes (``node.runs``)."""
    old = NodeState(NODE_ID, now - 120_000, rng=random.Random(3))
    jobs = [add(old, b"oq", b"job-%d" % i, retry=30, ttl=3600) for i in range(n)]
    node = make_node(now)
    for job in jobs:
        node.jobs.load(job)
    node.jobs.finish_load(False)
    node.runs = []
    process_job = node.requeue.process_job

    def counted(job):
        node.runs[-1] += 1
        process_job(job)
    node.requeue.process_job = counted
    return node, jobs


def wake(node):
    """What the runtime does at the node's deadline (a millisecond of work
    later at least): set the time, run what is due."""
    node.set_time(max(node.now + 1, node.next_deadline()))
    node.runs.append(0)
    node.run_due()


def test_overdue_loaded_jobs_are_requeued_a_bounded_number_per_run():
    node, jobs = restarted_node_with_overdue_jobs(2500)
    assert node.max_due == 1000
    node.runs.append(0)
    node.tick()  # the first tick, as the load ends
    assert node.runs == [1000]
    assert node.next_deadline() <= node.now  # the rest is due: the runtime comes back at once
    while not all(j.state == QUEUED for j in jobs):
        wake(node)
        assert node.runs[-1] <= 1000
        assert len(node.runs) < 20
    # WILLQUEUE to the copies for each (none here) in three runs, then 500 ms
    # later the requeue itself in three runs: each job processed twice.
    assert [r for r in node.runs if r] == [1000, 1000, 500, 1000, 1000, 500]
    assert node.now - T0 < 520
    q = node.queues.get(b"oq")
    assert len(q.jobs) == len(jobs) and all(j.deliv == 1 for j in jobs)  # each queued once
    assert len(node.schedule) == len(jobs) and all(j.awake > node.now for j in jobs)
    assert node.next_deadline() > node.now


def test_earliest_due_jobs_go_first_and_each_once():
    node, jobs = restarted_node_with_overdue_jobs(2500)
    node.max_due = 300
    order = []
    process_job = node.requeue.process_job

    def first_pass(job):
        if job.state == ACTIVE and job.qtime < T0:  # its WILLQUEUE step, the awake time of the AOF
            order.append(job.qtime)
        process_job(job)
    node.requeue.process_job = first_pass
    while not all(j.state == QUEUED for j in jobs):
        wake(node)
        assert node.runs[-1] <= 300
    windows = [-(-t // 10) for t in order]  # Schedule.RESOLUTION
    assert windows == sorted(windows) and len(order) == len(jobs)
    assert len(node.queues.get(b"oq").jobs) == len(jobs) and all(j.deliv == 1 for j in jobs)


def test_jobs_sharing_their_ttl_expire_over_several_runs():
    node = make_node()
    jobs = [add(node, b"tq", b"job-%d" % i, retry=0, ttl=10) for i in range(2500)]  # one etime
    node.set_time(T0 + 10_000)
    node.runs = [0]
    process_job = node.requeue.process_job

    def counted(job):
        node.runs[-1] += 1
        process_job(job)
    node.requeue.process_job = counted
    node.tick()
    assert node.runs == [1000] and len(node.jobs) == 1500
    while len(node.jobs):
        wake(node)
        assert node.runs[-1] <= 1000 and len(node.runs) < 10
    assert node.runs == [1000, 1000, 500] and len(node.schedule) == 0 and node.next_deadline() is None
    assert node.queues.get(b"tq") is None or not node.queues.get(b"tq").jobs
    assert all(node.jobs.get(j.id) is None for j in jobs)


def test_the_end_of_a_load_makes_jobs_active_in_steps():
    """Jobs.finishing_load: ``step`` jobs a step, each made active (a
    controlled restart queues those that were queued), the count of jobs
    queued so far after each step, the last time once all are done."""
    node = make_node()
    jobs = []
    for i in range(5):
        job = Job(b"D-" + (b"%036d" % i) + b"-0001", b"q", b"body", QUEUED, 1, (T0 - 1000) * 1_000_000,
                  T0 + 3_600_000, 0, 10, T0 + 10_000)
        node.jobs.load(job)
        jobs.append(job)
    steps = node.jobs.finishing_load(True, step=2)
    assert next(steps) == 2 and len(node.queues.queue_for(b"q")) == 2  # two done, three as loaded
    assert list(steps) == [4, 5]
    assert all(j.state == QUEUED for j in jobs) and len(node.queues.queue_for(b"q")) == 5
    plain = make_node()  # not a controlled restart: active, awaiting the requeue time
    job = Job(b"D-" + b"9" * 36 + b"-0001", b"q", b"body", QUEUED, 1, (T0 - 1000) * 1_000_000,
              T0 + 3_600_000, 0, 10, T0 + 10_000)
    plain.jobs.load(job)
    assert list(plain.jobs.finishing_load(False, step=10)) == [0]
    assert job.state == ACTIVE and len(plain.queues.queue_for(b"q")) == 0
