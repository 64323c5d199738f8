"""NACK DELAY, BACKOFF and dead letters (docs/extensions.md) on one node:
the commands and their errors, the fake clock's view of delays, the dead
letter's shape, the AOF record; and the replies of jobs that use no
extension, unchanged.  The cluster side is tests/sim/test_extensions_cluster.py."""

import random

import pytest
from hypothesis import given, strategies as st

from disque.commands.views import job_fields
from disque.core import options
from disque.core.deadletter import dead_letter_id
from disque.core.job import ACTIVE, F_NACK_DELAYED, QUEUED, deserialize, serialize
from disque.core.node import NodeState
from disque.core.options import make as make_options
from tests.support.memory import Node

NOW = 1_795_347_500_000


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "n", {})
    yield n
    n.service.stopService()


def core(node):
    return node.runtime.node


def fields(node, job_id) -> dict:
    job = core(node).jobs.get(job_id)
    return None if job is None else dict(job_fields(core(node), job))


def add(c, *args) -> bytes:
    reply = c.call("ADDJOB", "q", "body", "0", *args)
    assert reply.startswith(b"+D-"), reply
    return reply[1:-2]


def deliver(c, queue="q") -> bytes:
    got = c.call("GETJOB", "NOHANG", "FROM", queue)
    ids = [line for line in got.split(b"\r\n") if line.startswith(b"D-")]
    assert len(ids) == 1, got
    return ids[0]


def qlen(c, queue="q") -> int:
    return int(c.call("QLEN", queue)[1:-2])


# -- NACK ... DELAY -----------------------------------------------------------------

def test_nack_delay_keeps_the_job_out_of_its_queue_until_its_time(node):
    c = node.connect()
    job_id = add(c, "RETRY", "60")
    assert deliver(c) == job_id
    start = core(node).now
    assert c.call("NACK", job_id, "DELAY", "2000") == b":1\r\n"
    shown = fields(node, job_id)
    assert shown[b"redeliver-at"] == start + 2000 and shown[b"nacks"] == 1 and shown[b"state"] == b"active"
    assert b"redeliver-at" in c.call("SHOW", job_id)
    node.advance(1.9)
    assert qlen(c) == 0 and c.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"
    node.advance(0.2)
    assert qlen(c) == 1
    shown = fields(node, job_id)
    # the requeue the delay scheduled counts nothing more
    assert shown[b"nacks"] == 1 and shown[b"additional-deliveries"] == 0 and b"redeliver-at" not in shown


def test_nack_without_delay_or_with_delay_0_is_the_originals(node):
    c = node.connect()
    plain = add(c)
    deliver(c)
    assert c.call("NACK", plain, "DELAY", "0") == b":1\r\n"
    assert qlen(c) == 1
    deliver(c)
    assert c.call("NACK", plain) == b":1\r\n" and qlen(c) == 1
    shown = c.call("SHOW", plain)
    assert shown.startswith(b"*30\r\n") and b"redeliver-at" not in shown  # the original's reply


@pytest.mark.parametrize("args,error", [
    (("DELAY", "-1"), b"-ERR NACK DELAY must be a number of milliseconds"),
    (("DELAY", "soon"), b"-ERR NACK DELAY must be a number of milliseconds"),
    (("DELAY", str(2 ** 62)), b"-ERR NACK DELAY must be a number of milliseconds"),
    (("DELAY",), b"-BADID"),
])
def test_nack_delay_errors(node, args, error):
    c = node.connect()
    job_id = add(c)
    deliver(c)
    assert c.call("NACK", job_id, *args).startswith(error)
    assert fields(node, job_id)[b"nacks"] == 0  # nothing changed
    assert c.call("NACK", "DELAY", "100") == b":0\r\n"  # no IDs: as the original's bare NACK


def test_enqueue_cuts_a_delay_short_and_ack_ends_it(node):
    c = node.connect()
    a, b = add(c), add(c)
    deliver(c), deliver(c)
    c.call("NACK", a, b, "DELAY", "60000")
    assert c.call("ENQUEUE", a) == b":1\r\n" and qlen(c) == 1
    assert fields(node, a)[b"nacks"] == 1 and fields(node, a)[b"additional-deliveries"] == 0
    assert c.call("ACKJOB", b) == b":1\r\n"
    node.advance(61)
    assert qlen(c) == 1  # b never came back


# -- BACKOFF ---------------------------------------------------------------------------

@given(st.integers(1, options.MAX_BACKOFF_MS), st.integers(0, options.MAX_BACKOFF_MS), st.integers(1, 200),
       st.floats(0, 1, exclude_max=True))
def test_backoff_delays_double_up_to_the_cap_less_the_jitter(base, extra, nacks, draw):
    cap = min(base + extra, options.MAX_BACKOFF_MS)
    opts = make_options(backoff=base, backoff_max=cap)
    computed = min(cap, base * 2 ** (nacks - 1))
    delay = opts.backoff_delay(nacks, lambda: draw)
    assert computed * (1 - options.BACKOFF_JITTER) - 1 <= delay <= computed <= cap
    assert make_options().backoff_delay(nacks, lambda: draw) == 0


def test_backoff_fixed_and_exp_through_nack(node):
    c = node.connect()
    fixed = add(c, "BACKOFF", "FIXED", "1000")
    exp = add(c, "BACKOFF", "EXP", "100", "350")
    gaps = {fixed: [], exp: []}
    for _ in range(4):
        for job_id in (fixed, exp):
            assert c.call("GETJOB", "NOHANG", "FROM", "q").count(job_id) in (0, 1)
        for job_id in (fixed, exp):
            job = core(node).jobs.get(job_id)
            if job.state == QUEUED:
                core(node).queues.dequeue(job)  # as if delivered
            c.call("NACK", job_id)
            gaps[job_id].append(fields(node, job_id)[b"redeliver-at"] - core(node).now)
        node.advance(1.1)
    assert all(800 <= g <= 1000 for g in gaps[fixed]), gaps
    bounds = [(80, 100), (160, 200), (280, 350), (280, 350)]
    assert all(lo <= g <= hi for g, (lo, hi) in zip(gaps[exp], bounds)), gaps
    assert fields(node, exp)[b"backoff"] == (100, 350)
    assert b"$7\r\nbackoff\r\n*2\r\n:100\r\n:350\r\n" in c.call("SHOW", exp)
    core(node).queues.dequeue(core(node).jobs.get(exp))
    assert c.call("NACK", exp, "DELAY", "5") == b":1\r\n"  # an explicit DELAY wins over BACKOFF
    assert fields(node, exp)[b"redeliver-at"] == core(node).now + 5


@pytest.mark.parametrize("args", [("BACKOFF", "FIXED", "0"), ("BACKOFF", "FIXED", "x"), ("BACKOFF", "EXP", "5", "4"),
                                  ("BACKOFF", "EXP", "5"), ("BACKOFF", "LINEAR", "5"),
                                  ("BACKOFF", "FIXED", str(options.MAX_BACKOFF_MS + 1))])
def test_backoff_errors(node, args):
    reply = node.connect().call("ADDJOB", "q", "x", "0", *args)
    assert reply.startswith(b"-ERR BACKOFF must be FIXED <ms> or EXP") or reply == b"-ERR syntax error\r\n", reply


# -- Dead letters ---------------------------------------------------------------------

def test_a_job_past_its_deliveries_moves_to_the_dead_letter_queue_once(node):
    c = node.connect()
    job_id = add(c, "MAXDELIVERIES", "2", "PRIORITY", "7")
    assert deliver(c) == job_id and c.call("NACK", job_id) == b":1\r\n"  # second delivery to come
    assert deliver(c) == job_id and c.call("NACK", job_id) == b":1\r\n"  # a third would pass 2
    assert qlen(c) == 0 and qlen(c, "q:dead") == 1
    assert fields(node, job_id) is None  # acknowledged and collected (a single node)
    dead = dead_letter_id(job_id)
    shown = fields(node, dead)
    assert shown[b"queue"] == b"q:dead" and shown[b"dead-from"] == b"q" and shown[b"dead-reason"] == b"max-deliveries"
    assert shown[b"nacks"] == 2 and shown[b"body"] == b"body" and shown[b"priority"] == 7
    assert shown[b"dedup"] == job_id
    assert dead[:11] == job_id[:11] and dead[-5:] == job_id[-5:] and dead != job_id
    qstat = c.call("QSTAT", "q")
    assert qstat.startswith(b"*22\r\n") and qstat.endswith(b"$4\r\ndead\r\n:1\r\n")
    assert c.call("QSTAT", "q:dead").startswith(b"*20\r\n")
    # A dead letter is never dead-lettered again: NACK it past any limit.
    for _ in range(4):
        assert deliver(c, "q:dead") == dead
        c.call("NACK", dead)
    assert qlen(c, "q:dead") == 1 and qlen(c, "q:dead:dead") == 0


def test_retry_timeouts_count_as_deliveries_and_deadletter_names_the_queue(node):
    c = node.connect()
    job_id = add(c, "RETRY", "1", "MAXDELIVERIES", "1", "DEADLETTER", "poison")
    assert fields(node, job_id)[b"dead-letter"] == b"poison" and fields(node, job_id)[b"max-deliveries"] == 1
    deliver(c)
    node.advance(2)
    assert qlen(c) == 0 and qlen(c, "poison") == 1
    shown = fields(node, dead_letter_id(job_id))
    assert shown[b"additional-deliveries"] == 1 and shown[b"dead-from"] == b"q"
    assert shown[b"dead-letter"] == b"poison"


def test_the_dead_letter_keeps_the_originals_ttl(node):
    c = node.connect()
    job_id = add(c, "TTL", "100", "RETRY", "10", "MAXDELIVERIES", "1")
    deliver(c)
    node.advance(30)
    c.call("NACK", job_id)
    dead = core(node).jobs.get(dead_letter_id(job_id))
    assert dead.etime == NOW + 100_000 and dead.retry == 10
    node.advance(71)
    assert core(node).jobs.get(dead.id) is None and qlen(c, "q:dead") == 0


@pytest.mark.parametrize("args,error", [
    (("MAXDELIVERIES", "0"), b"-ERR MAXDELIVERIES must be between 1 and 4294967295"),
    (("MAXDELIVERIES", str(2 ** 32)), b"-ERR MAXDELIVERIES must be between 1 and 4294967295"),
    (("MAXDELIVERIES", "many"), b"-ERR MAXDELIVERIES must be between 1 and 4294967295"),
    (("DEADLETTER", "other"), b"-ERR DEADLETTER needs MAXDELIVERIES (or the max-deliveries directive)"),
    (("MAXDELIVERIES", "3", "DEADLETTER", "q"), b"-ERR DEADLETTER must name a queue other than the job's own"),
    (("MAXDELIVERIES", "3", "DEADLETTER", ""), b"-ERR DEADLETTER must name a queue other than the job's own"),
])
def test_dead_letter_option_errors(node, args, error):
    assert node.connect().call("ADDJOB", "q", "x", "0", *args) == error + b"\r\n"


def test_jobs_without_extensions_keep_the_originals_replies(node):
    c = node.connect()
    job_id = add(c)
    assert c.call("SHOW", job_id).startswith(b"*30\r\n")
    assert c.call("QSTAT", "q").startswith(b"*20\r\n")
    deliver(c)
    for _ in range(5):
        c.call("NACK", job_id)
        deliver(c)
    assert qlen(c, "q:dead") == 0 and fields(node, job_id)[b"nacks"] == 5


# -- The AOF record ------------------------------------------------------------------

def test_the_aof_record_keeps_a_delayed_nack_and_every_option():
    node = NodeState(b"f" * 40, NOW, rng=random.Random(1))
    opts = make_options(3, 100, 800, 4, b"graveyard")
    job = node.addjob.add(b"q", b"x", 1, 0, 5, 3600, 0, False, None, opts)
    node.getjob.get_jobs([b"q"], 1)
    assert node.requeue.nack_jobs([job.id], 4000) == 1
    record = serialize(job)
    loaded = NodeState(b"f" * 40, NOW + 1000, rng=random.Random(2))
    loaded.jobs.load(deserialize(record))
    loaded.jobs.finish_load(enqueue_queued=False)
    back = loaded.jobs.get(job.id)
    assert back.opts == opts and back.qtime == NOW + 4000 and back.flags & F_NACK_DELAYED and back.nacks == 1
    loaded.set_time(NOW + 3900)
    loaded.tick()
    assert back.state == ACTIVE
    loaded.set_time(NOW + 4400)  # a loaded job's WILLQUEUE first gets its 500 ms for answers
    loaded.tick()
    assert back.state == QUEUED and back.nacks == 1 and back.deliv == 0
    # Without the flag a record of an optioned job still reads back; a bad flags byte does not.
    dead = make_options(2, 0, 0, 1, b"", b"q", b"max-deliveries")
    plain = node.addjob.add(b"r", b"y", 1, 0, 5, 3600, 0, False, None, dead)
    assert deserialize(serialize(plain)).opts == dead and not deserialize(serialize(plain)).flags


def test_revive_puts_a_dead_letter_back_in_its_queue(node):
    c = node.connect()
    job_id = add(c, "MAXDELIVERIES", "1", "PRIORITY", "8", "BACKOFF", "FIXED", "100", "TTL", "100")
    deliver(c)
    c.call("NACK", job_id)
    dead = dead_letter_id(job_id)
    node.advance(10)
    got = c.call("REVIVE", dead, job_id)
    lines = got.split(b"\r\n")
    assert lines[0] == b"*2" and lines[-2] == b"$-1"  # the original is no dead letter
    new_id = lines[2]
    assert qlen(c) == 1 and qlen(c, "q:dead") == 0 and fields(node, dead) is None  # acknowledged
    shown = fields(node, new_id)
    assert shown[b"queue"] == b"q" and shown[b"nacks"] == 0 and shown[b"priority"] == 8
    assert shown[b"max-deliveries"] == 1 and shown[b"backoff"] == (100, 100) and b"dead-from" not in shown
    assert 85 <= shown[b"ttl"] <= 90  # the TTL it had left
    assert c.call("REVIVE", dead) == b"*1\r\n$-1\r\n"  # gone: nothing twice
    assert c.call("REVIVE", "nope").startswith(b"-BADID")
    assert c.call("REVIVE").startswith(b"-ERR wrong number of arguments")
