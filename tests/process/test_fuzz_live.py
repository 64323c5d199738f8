"""A short ``tests/tools/fuzz.py --live`` run against a real node, and proof that
its victim check fails when the victim's jobs are touched."""

import random

import pytest

from tests.tools import fuzz


@pytest.mark.parametrize("target", ["resp", "bus"])
def test_a_live_node_survives_generated_input_and_the_victims_jobs_are_intact(target):
    """No exit, PING answered after each batch, no traceback in the log,
    every connection closed by the node, replies that are RESP, the
    victim's 50 jobs exactly as added, no node added but by a MEET."""
    args = fuzz.parse_args(["--live", "--target", target, "--count", "2500", "--batch", "1000",
                            "--concurrency", "8", "--rss-bound", "1000"])
    report = fuzz.fuzz_live(target, args.count, 31, args)
    assert report.count == 2500
    assert report.finding_count == 0, report.summary()
    assert "end" in report.extra["rss kB"]  # the end checks ran


def test_the_victim_check_sees_a_touched_job(tmp_path):
    live = fuzz.LiveNode(str(tmp_path), random.Random(1))
    try:
        assert live.check_victim() == []
        job_id, body = next(iter(live.jobs.items()))
        live.ctl.call(b"DELJOB", job_id)
        problems = live.check_victim()
        assert any("gone" in p for p in problems) and any("QLEN" in p for p in problems)
    finally:
        live.stop()


def test_a_protocol_error_while_replies_wait_still_closes_the_connection(tmp_path):
    """Found by the live fuzzer (connections left open after the client's
    half-close): the protocol is its transport's streaming producer, and
    Twisted's loseConnection waits for a registered producer that the
    transport paused: a protocol error read together with a request whose
    reply overflowed the transport's buffer left the connection open for
    good, after every reply had been read."""
    from tests.support.process import Client, NodeProcess

    node = NodeProcess(str(tmp_path)).start()
    try:
        c = Client(node.port)
        body = b"x" * 100_000
        for _ in range(60):
            c.call("ADDJOB", "big", body, "0")
        c.send(Client.encode("QPEEK", "big", "60") + b"*abc\r\n")  # 6 MB of reply, then an error
        jobs = c.read(timeout=30)
        assert len(jobs) == 60
        assert str(c.read(timeout=30)) == "ERR Protocol error: invalid multibulk length"
        assert c.closed_within(10)
    finally:
        node.stop()
