"""PRIORITY (docs/extensions.md), on one node: the queue container, ADDJOB,
GETJOB, QPEEK, SHOW and the AOF record; jobs that use no extension keep
the original's replies and records byte for byte."""

import random
import struct

import pytest
from hypothesis import given, strategies as st

from disque.commands.views import job_fields
from disque.core.job import (ACTIVE, PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN, Job, BadRecord,
                             deserialize, serialize)
from disque.core import options
from disque.core.options import make as make_options
from disque.core.node import NodeState
from disque.core.queue import JobList, PriorityJobs


def fresh():
    return NodeState(b"f" * 40, 1_000_000, rng=random.Random(1))


def add(node, queue=b"q", priority=None, body=b"x"):
    opts = None if priority is None else make_options(priority)
    return node.addjob.add(queue, body, 1, 0, -1, 3600, 0, False, None, opts)


def job(ctime, priority=None):
    j = Job(b"D-%038d" % ctime, b"q", b"", ACTIVE, 1, ctime, 10 ** 12, 0, 1, 0)
    j.extra.opts = None if priority is None else make_options(priority)
    return j


def serving_order(jobs):
    """What a queue must serve: highest priority first, then creation order."""
    return sorted(jobs, key=lambda j: (-j.priority, j.ctime))


@given(st.lists(st.tuples(st.sampled_from(["add", "pop", "remove"]), st.integers(0, 60),
                          st.one_of(st.none(), st.integers(PRIORITY_MIN, PRIORITY_MAX))), max_size=80))
def test_priority_jobs_serve_like_a_sorted_list(ops):
    container, model, made = PriorityJobs(), [], 0
    for op, ctime, priority in ops:
        if op == "add":
            made += 1
            j = job(ctime * 1000 + made, priority)
            container.add(j)
            model.append(j)
        elif op == "pop" and model:
            expected = serving_order(model)[0]
            assert container.pop(0) is expected
            model.remove(expected)
        elif op == "remove" and model:
            victim = model[ctime % len(model)]
            container.remove(victim)
            model.remove(victim)
        ordered = serving_order(model)
        assert list(container) == ordered and len(container) == len(model)
        assert container.head(3) == ordered[:3] and container.tail(4) == ordered[::-1][:4]
        if model:
            assert container[0] is ordered[0] and container[-1] is ordered[-1]
            assert container[len(model) // 2] is ordered[len(model) // 2]
            assert all(j in container for j in model)
    with pytest.raises(ValueError):
        container.remove(job(10 ** 9, 2))


def test_a_queue_switches_to_priorities_with_its_first_prioritised_job():
    node = fresh()
    plain = [add(node).id for _ in range(3)]
    q = node.queues.get(b"q")
    assert type(q.jobs) is JobList
    add(node, priority=PRIORITY_DEFAULT)  # the default, given: still one list
    assert type(q.jobs) is JobList
    low = add(node, priority=1).id
    high = [add(node, priority=9).id for _ in range(2)]
    mid = add(node, priority=7).id
    assert type(q.jobs) is PriorityJobs
    served = [j.id for j in node.getjob.get_jobs([b"q"], 10)]
    assert served[:3] == high + [mid] and served[-1] == low
    assert served[3:6] == plain  # default priority, in creation order, before the low one


def test_getjob_qpeek_and_show_through_commands(tmp_path):
    from tests.support.memory import Node

    node = Node(tmp_path / "n", {})
    c = node.connect()
    ids = {}
    for name, priority in (("a", None), ("b", "2"), ("c", "9"), ("d", "9"), ("e", "5")):
        args = ["ADDJOB", "q", name, "0"] + (["PRIORITY", priority] if priority else [])
        ids[name] = c.call(*args)[1:-2]
    peek = c.call("QPEEK", "q", "5")
    assert [ids[n] for n in "cdaeb"] == [line for line in peek.split(b"\r\n") if line.startswith(b"D-")]
    assert c.call("QPEEK", "q", "-1").count(ids["b"]) == 1  # the last to be served
    plain = c.call("SHOW", ids["a"])
    assert plain.startswith(b"*30\r\n") and b"priority" not in plain  # the original's reply
    shown = c.call("SHOW", ids["e"])
    assert shown.startswith(b"*32\r\n") and shown.endswith(b"$8\r\npriority\r\n:5\r\n")
    got = c.call("GETJOB", "COUNT", "5", "FROM", "q")
    assert [line for line in got.split(b"\r\n") if line.startswith(b"D-")] == [ids[n] for n in "cdaeb"]
    for bad in ("0", "10", "high", "-1"):
        assert c.call("ADDJOB", "q", "x", "0", "PRIORITY", bad) == b"-ERR PRIORITY must be between 1 and 9\r\n"
    assert c.call("ADDJOB", "q", "x", "0", "PRIORITY") == b"-ERR syntax error\r\n"
    node.service.stopService()


def test_jobs_with_equal_options_share_their_record():
    node = fresh()
    a, b = add(node, priority=3), add(node, priority=3)
    c, d = add(node), add(node, priority=8)
    assert a.extra is b.extra and a.extra.shared
    assert c.extra is not a.extra and d.extra is not a.extra and c.extra.opts is None


def record_v1_part(job):
    """A record's bytes after its version byte up to its DEDUP key: the
    fields every version shares."""
    plain = serialize(Job(job.id, job.queue, job.body, job.state, job.repl, job.ctime, job.etime, job.delay,
                          job.retry, job.qtime))
    return plain[1:]


def test_the_aof_record_keeps_the_priority_and_the_old_records_are_unchanged():
    node = fresh()
    plain = add(node)
    record = serialize(plain)
    assert record[0] == 1  # version 1, as before any extension
    again = deserialize(record)
    assert again.opts is None and serialize(again) == record
    keyed = add(node, queue=b"k")
    keyed.dedup = b"key"
    assert serialize(keyed)[0] == 2
    prioritised = add(node, priority=8)
    prioritised.dedup = b"k2"
    back = deserialize(serialize(prioritised))
    assert serialize(prioritised)[0] == 4 and back.priority == 8 and back.dedup == b"k2"
    # Version 3, as the first release with priorities wrote it, still loads.
    v3 = b"\x03" + record_v1_part(prioritised) + struct.pack(">H", 2) + b"k2" + b"\x08"
    old = deserialize(v3)
    assert old.opts == make_options(8) and old.dedup == b"k2" and old.id == prioritised.id
    with pytest.raises(BadRecord):
        deserialize(v3[:-1] + b"\x0a")
    assert deserialize(serialize(add(node, priority=2))).dedup is None
    record = serialize(prioritised)
    at = len(record) - len(options.encode(prioritised.opts)) - 1  # the priority byte
    for pos, value in ((at, 0), (at, 10), (len(record) - 1, 2)):  # no options + trailing bytes, range, flags
        bad = bytearray(record)
        bad[pos] = value
        with pytest.raises(BadRecord):
            deserialize(bytes(bad))


def test_a_loaded_job_keeps_its_priority_and_its_place():
    node = fresh()
    jobs = [add(node, priority=p) for p in (2, 9, None, 9)]
    records = [serialize(j) for j in jobs]
    loaded = fresh()
    for r in records:
        loaded.jobs.load(deserialize(r))
    loaded.jobs.finish_load(enqueue_queued=True)
    served = loaded.getjob.get_jobs([b"q"], 4)
    assert [j.id for j in served] == [jobs[1].id, jobs[3].id, jobs[2].id, jobs[0].id]
    assert [dict(job_fields(loaded, j)).get(b"priority") for j in served] == [9, 9, None, 2]
