"""QLIMIT on one node through the RESP adapter (docs/extensions.md): set,
show, remove, the errors; GETJOB held by a rate limit and served when the
token comes (a blocked client woken by the node's timer); the fields QSTAT,
INFO and /metrics add for a limited queue, and nothing added for the
others.  The cluster side is tests/sim/test_qlimits_cluster.py."""

import pytest

from tests.support.memory import Node


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "n", {})
    yield n
    n.service.stopService()


def add(c, n, queue="q"):
    for _ in range(n):
        assert c.call("ADDJOB", queue, "body", "0").startswith(b"+D-")


def count_jobs(reply: bytes) -> int:
    return reply.count(b"\r\n$40\r\nD-")


def test_set_show_and_remove(node):
    c = node.connect()
    assert c.call("QLIMIT", "q") == b"*0\r\n"
    assert c.call("QLIMIT", "q", "RATE", "2.5", "CONCURRENCY", "3") == b"+OK\r\n"
    assert c.call("QLIMIT", "q") == (
        b"*14\r\n$4\r\nrate\r\n$3\r\n2.5\r\n$5\r\nburst\r\n:2\r\n$11\r\nconcurrency\r\n:3\r\n"
        b"$9\r\nrate-here\r\n$3\r\n2.5\r\n$16\r\nconcurrency-here\r\n:3\r\n$9\r\nin-flight\r\n:0\r\n"
        b"$4\r\nheld\r\n:0\r\n")
    assert c.call("qlimit", "q", "rate", "100", "burst", "7").startswith(b"+OK")  # a set replaces it all
    shown = c.call("QLIMIT", "q")
    assert b"$3\r\n100\r\n$5\r\nburst\r\n:7\r\n$11\r\nconcurrency\r\n:0\r\n" in shown
    assert c.call("QLIMIT", "q", "NONE") == b"+OK\r\n"
    assert c.call("QLIMIT", "q") == b"*0\r\n"


@pytest.mark.parametrize("args,error", [
    (("RATE", "0"), b"-ERR RATE must be a number greater than zero"),
    (("RATE", "-1"), b"-ERR RATE must be"),
    (("RATE", "1.2345"), b"-ERR RATE must be"),
    (("RATE", "2000000"), b"-ERR RATE must be"),
    (("RATE", "abc"), b"-ERR RATE must be"),
    (("RATE", "5", "BURST", "0"), b"-ERR BURST must be a number greater than zero"),
    (("BURST", "5"), b"-ERR BURST needs RATE"),
    (("CONCURRENCY", "0"), b"-ERR CONCURRENCY must be a number greater than zero"),
    (("CONCURRENCY", "99999999999"), b"-ERR CONCURRENCY must be"),
    (("NONE", "RATE", "5"), b"-ERR NONE takes no other option"),
    (("RATE", "5", "NONE"), b"-ERR NONE takes no other option"),
    (("RATE",), b"-ERR syntax error"),
    (("FAST", "5"), b"-ERR syntax error"),
])
def test_bad_input_gets_an_error_and_changes_nothing(node, args, error):
    c = node.connect()
    assert c.call("QLIMIT", "q", *args).startswith(error)
    assert c.call("QLIMIT", "q") == b"*0\r\n"
    assert c.call("QLIMIT").startswith(b"-ERR wrong number of arguments")
    assert c.call("QLIMIT", "", "RATE", "5").startswith(b"-ERR a limited queue's name must have 1 to 1024 bytes")


def test_getjob_under_a_rate_limit_and_a_blocked_client_woken_by_its_token(node):
    c, waiting = node.connect(), node.connect()
    add(c, 10)
    c.call("QLIMIT", "q", "RATE", "2")  # burst 2
    assert count_jobs(c.call("GETJOB", "COUNT", "10", "FROM", "q")) == 2
    assert c.call("GETJOB", "NOHANG", "FROM", "q") == b"*-1\r\n"
    assert waiting.call("GETJOB", "FROM", "q") == b""  # blocked: the bucket is empty
    node.advance(0.3)
    assert waiting.take() == b""
    node.advance(0.3)  # 0.5 s after: a token
    assert count_jobs(waiting.take()) == 1
    assert c.call("QLEN", "q") == b":7\r\n"


def test_qstat_info_and_metrics_show_a_limited_queue_only(node):
    c = node.connect()
    add(c, 3, "free")
    add(c, 3, "q")
    plain = c.call("QSTAT", "q")
    assert c.call("QSTAT", "free").count(b"\r\n$") == plain.count(b"\r\n$")
    info = c.call("INFO", "queues")
    assert b"limited_queues" not in info
    c.call("QLIMIT", "q", "RATE", "1", "CONCURRENCY", "2")
    c.call("GETJOB", "COUNT", "3", "FROM", "q")
    stat = c.call("QSTAT", "q")
    assert stat.startswith(b"*30\r\n") and stat.endswith(
        b"$4\r\nrate\r\n$1\r\n1\r\n$5\r\nburst\r\n:1\r\n$11\r\nconcurrency\r\n:2\r\n"
        b"$9\r\nin-flight\r\n:1\r\n$4\r\nheld\r\n:1\r\n")
    assert c.call("QSTAT", "free").startswith(b"*20\r\n")  # the original's fields, no more
    info = c.call("INFO", "queues")
    assert b"limited_queues:1\r\nlimited_in_flight:1\r\nlimit_held_getjobs:1" in info


def test_a_limit_comes_back_from_the_aof(tmp_path):
    """QLIMIT writes its catalog entry to the AOF (acknowledged once it is
    there): a node started on the files as they are (what kill -9 leaves)
    has the limit, and a removal too."""
    import shutil

    def done(node, conn, *args):
        """The reply to ``args``, which may wait for the record on disk (a bounded wait)."""
        reply = conn.call(*args)
        for _ in range(200):
            if reply:
                return reply
            node.advance(0.01)
            reply = conn.take()
        return reply

    first = Node(tmp_path / "a", {"appendonly": "yes"})
    c = first.connect()
    assert done(first, c, "QLIMIT", "q", "RATE", "2.5", "CONCURRENCY", "3") == b"+OK\r\n"
    assert done(first, c, "QLIMIT", "gone", "RATE", "1") == b"+OK\r\n"
    assert done(first, c, "QLIMIT", "gone", "NONE") == b"+OK\r\n"
    shutil.copytree(first.dir, str(tmp_path / "b"))
    first.service.stopService()
    second = Node(tmp_path / "b", {"appendonly": "yes"})
    try:
        c2 = second.connect()
        shown = c2.call("QLIMIT", "q")
        assert shown.startswith(b"*14\r\n$4\r\nrate\r\n$3\r\n2.5\r\n$5\r\nburst\r\n:2\r\n$11\r\nconcurrency\r\n:3\r\n")
        assert c2.call("QLIMIT", "gone") == b"*0\r\n"
    finally:
        second.service.stopService()
