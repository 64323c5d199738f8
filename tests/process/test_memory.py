"""maxmemory tiers: the estimate, external replication above 75%, eviction
above 95%, -OOM at 100% (core with a fake clock, then real processes)."""

import hiredis
import pytest

from disque.core.job import ACKED
from disque.core.errors import CommandError
from disque.core.memory import JOB_OVERHEAD
from disque.core.node import NodeState
from tests.support.process import NodeProcess, call, info, show, start_cluster, wait_for


def node_with(n, body=b"x" * 100, **kw):
    node = NodeState(b"a" * 40, now=1_000_000)
    for _ in range(n):
        node.addjob.add(b"q", body, 1, 0, kw.get("retry", -1), 3600, 0, False)
    return node


def test_estimate_follows_jobs_and_goes_down_when_they_go():
    node = node_with(1000)
    used = node.memory.used()
    assert 1000 * (JOB_OVERHEAD + 100) <= used < 1000 * (JOB_OVERHEAD + 100) + 5000
    ids = [j.id for j in list(node.jobs.values())[:500]]
    node.acks.delete_jobs(ids)
    assert node.memory.used() < used * 0.6


def test_tiers():
    node = node_with(1000)
    used = node.memory.used()
    assert node.memory.update_level(used * 2) == 0
    assert node.memory.update_level(int(used / 0.8)) == 1
    with pytest.raises(CommandError) as e:  # a single node cannot replicate elsewhere
        node.addjob.add(b"q", b"x", 1, 0, -1, 3600, 0, False)
    assert e.value.code == b"NOREPL" and b"out of memory" in e.value.message
    assert node.memory.update_level(used) == 3


def test_eviction_takes_only_what_no_guarantee_needs():
    node = node_with(200, retry=0)  # at-most-once jobs
    delivered = node.getjob.get_jobs([b"q"], 100)  # 100 delivered, 100 still queued
    used = node.memory.used()
    node.memory.set_limit(int(used / 0.97))  # just above 95%: a little goes
    assert 100 < len(node.jobs) < 200
    node.memory.set_limit(1)  # far over: everything evictable goes
    assert all(j.id not in node.jobs for j in delivered)  # delivered RETRY 0: gone
    assert len(node.queues.get(b"q").jobs) == 100  # queued ones untouched
    # At-least-once jobs that are not acked are never evicted.
    keep = node_with(100)
    for j in list(keep.jobs.values())[:10]:
        keep.acks.acknowledge(j)
    keep.memory.set_limit(1)
    assert len(keep.jobs) == 90 and all(j.state != ACKED for j in keep.jobs.values())


def test_oom_tiers_on_a_real_node(tmp_path):
    node = NodeProcess(tmp_path / "n", args=("--maxmemory", "3mb")).start()
    try:
        c = node.client()
        ids = []
        while True:
            reply = c.call("ADDJOB", "mq", "x" * 100, "0")
            if isinstance(reply, hiredis.ReplyError):
                break
            ids.append(reply)
            assert len(ids) < 100000
        assert str(reply).startswith("NOREPL") and "out of memory" in str(reply)
        # 75% of 3 MB at ~630 bytes per job: a realistic count.
        assert 3000 < len(ids) < 4500
        mem = info(c, "memory")
        assert 0.74 * 3 * 1024 * 1024 <= int(mem["used_memory"]) <= 3 * 1024 * 1024
        # Reading and acknowledging keep working; then there is room again.
        got = c.call("GETJOB", "COUNT", "1000", "FROM", "mq")
        assert len(got) == 1000
        assert c.call("ACKJOB", *[j[1] for j in got]) == 1000
        assert c.call("ADDJOB", "mq", "again", "0").startswith(b"D-")
        c.close()
    finally:
        node.kill()


def test_oom_error_at_100_percent(tmp_path):
    node = NodeProcess(tmp_path / "n").start()
    try:
        for i in range(200):
            call(node, "ADDJOB", "oq", "x" * 1000, "0")
        assert call(node, "CONFIG", "SET", "maxmemory", "100kb") == b"OK"
        reply = call(node, "ADDJOB", "oq", "y", "0")
        assert isinstance(reply, hiredis.ReplyError) and str(reply).startswith("OOM")
        assert call(node, "QLEN", "oq") == 200  # reads work
        got = call(node, "GETJOB", "FROM", "oq")  # and so does GETJOB
        assert call(node, "ACKJOB", got[0][1]) == 1
    finally:
        node.kill()


def test_above_75_percent_a_cluster_node_replicates_to_others_only(tmp_path):
    nodes = start_cluster(tmp_path, 3)
    try:
        a = nodes[0]
        for i in range(100):
            call(a, "ADDJOB", "fill", "x" * 1000, "0", "REPLICATE", "1")
        used = int(info(a.client(), "memory")["used_memory"])
        assert call(a, "CONFIG", "SET", "maxmemory", str(int(used / 0.8))) == b"OK"
        import time
        time.sleep(0.3)  # the next tick sees the new limit
        job_id = call(a, "ADDJOB", "ext", "body", "0", "REPLICATE", "2")
        assert job_id.startswith(b"D-")
        holders = [i for i, n in enumerate(nodes) if show(n, job_id) is not None]
        assert holders == [1, 2]  # no local copy on A
        # Queued by one of the copies, which A asked with ENQUEUE.
        wait_for(lambda: sum(call(n, "QLEN", "ext") for n in nodes) == 1, what="ENQUEUE on a copy")
        assert call(a, "QLEN", "ext") == 0
    finally:
        for n in nodes:
            n.kill()
