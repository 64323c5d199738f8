"""ADDJOB ... DEDUP on real nodes: the real redis-cli, a real 3-node
cluster losing the node a producer talked to, a restart from the AOF, and
a rewritten AOF (the key is part of the job record)."""

import os
import signal

from tests.support.process import NodeProcess, call, redis_cli, show, start_cluster, wait_for

AOF = ("--appendonly", "yes", "--set", "appendfsync=always")


def test_redis_cli_sees_one_job_per_key(node):
    rc, first = redis_cli(node.port, "ADDJOB", "q", "hello", "0", "DEDUP", "order-17")
    assert rc == 0 and first.startswith(b"D-")
    rc, again = redis_cli(node.port, "ADDJOB", "q", "hello again", "0", "DEDUP", "order-17")
    assert again == first
    rc, out = redis_cli(node.port, "QLEN", "q")
    assert out == b"1\n"
    rc, out = redis_cli(node.port, "SHOW", first.strip())
    lines = out.split(b"\n")
    assert lines[lines.index(b"dedup") + 1] == b"order-17"
    rc, out = redis_cli(node.port, "ADDJOB", "q", "x", "0", "DEDUP", "")
    assert out.strip() == b"ERR DEDUP key must be between 1 and 1024 bytes"


def test_a_retry_on_another_node_holding_a_copy_gets_the_same_id(tmp_path):
    nodes = start_cluster(tmp_path, 3)
    try:
        a, b, c = nodes
        job_id = call(a, "ADDJOB", "q", "payload", "5000", "REPLICATE", "3", "DEDUP", "k1")
        assert job_id.startswith(b"D-")
        assert show(b, job_id)[b"dedup"] == b"k1"
        a.kill()
        # The producer lost its node (it may or may not have seen the reply):
        # it retries on another node, which holds a copy.
        for other in (b, c):
            assert call(other, "ADDJOB", "q", "payload", "5000", "REPLICATE", "2", "DEDUP", "k1") == job_id
        assert sum(call(n, "QLEN", "q") for n in (b, c)) <= 1
        got = call(b, "JSCAN", "QUEUE", "q", "BUSYLOOP")[1] + call(c, "JSCAN", "QUEUE", "q", "BUSYLOOP")[1]
        assert set(got) == {job_id}
    finally:
        for n in nodes:
            n.stop()


def test_keys_come_back_from_the_aof_after_kill_9_and_after_a_rewrite(tmp_path):
    node = NodeProcess(tmp_path / "n", args=AOF).start()
    try:
        first = call(node, "ADDJOB", "q", "body", "0", "DEDUP", "k")
        other = call(node, "ADDJOB", "q", "body", "0", "DEDUP", "k2")
        node.stop(signal.SIGKILL)
        node.start()
        assert call(node, "ADDJOB", "q", "body", "0", "DEDUP", "k") == first
        assert call(node, "BGREWRITEAOF").startswith(b"Background")
        wait_for(lambda: b"aof_rewrite_in_progress:0" in call(node, "INFO", "persistence"), timeout=10)
        node.stop(signal.SIGKILL)
        node.start()
        assert call(node, "ADDJOB", "q", "body", "0", "DEDUP", "k2") == other
        assert call(node, "ADDJOB", "q", "body", "0", "DEDUP", "k") == first
        assert len(call(node, "JSCAN", "BUSYLOOP")[1]) == 2
        assert os.path.getsize(os.path.join(node.workdir, "disque.aof")) > 0
    finally:
        node.stop()
