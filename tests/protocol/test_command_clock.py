"""A read's pipeline shares clock reads between its commands
(``disque.commands.dispatcher.run_of_commands``): each command's time
starts where the previous one's ended.  Pinned here to the generic path,
every command alone in its read (its own start and end): with a fake
clock that only moves when read, or when the work that must not count
(blocked clients served, the slow log written, an ACL refusal recorded)
happens, the times in INFO commandstats and SLOWLOG must be the same
either way, and the pipeline must read the clock fewer times."""

import hiredis
import pytest

from disque.commands import dispatcher
from tests.support.memory import cmd

STEP = 1.0  # the fake clock moves 1 s per read (exact in a float): 10**6 us per command
EXTRA = 100.0  # what work that must not count moves it
QUIET = {"slowlog-log-slower-than": "-1"}  # (a second per command would log them all)
US = 10 ** 6


class FakeClock:
    def __init__(self):
        self.now = 1000.0
        self.reads = 0

    def __call__(self):
        self.reads += 1
        self.now += STEP
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(dispatcher, "perf_counter", fake)
    return fake


def usec(conn, name: bytes) -> int:
    stats = conn.call("INFO", "commandstats")
    return int(stats.partition(b"cmdstat_" + name + b":")[2].partition(b"usec=")[2].partition(b",")[0])


def slowlog_qlens(node):
    """The QLEN entries of SLOWLOG GET, oldest first."""
    reader = hiredis.Reader()
    reader.feed(node.connect().call("SLOWLOG", "GET", "100"))
    return [e for e in reversed(reader.gets()) if e[3][0] == b"QLEN"]


def run(conn, clock, requests, pipelined):
    """Send ``requests`` in one read or one read each, their statistics
    reset first (the command table's counters outlive a node); return
    their replies and how many times they read the clock."""
    assert conn.call("CONFIG", "RESETSTAT") == b"+OK\r\n"
    reads = clock.reads
    if pipelined:
        conn.proto.dataReceived(b"".join(cmd(*r) for r in requests))
    else:
        for r in requests:
            conn.proto.dataReceived(cmd(*r))
    return conn.take(), clock.reads - reads


@pytest.mark.parametrize("pipelined", [False, True])
def test_pipelined_commands_take_the_time_they_take_alone(make, clock, pipelined):
    conn = make(**QUIET).connect()
    requests = [("ADDJOB", "q", "body", "0")] * 5 + [("QLEN", "q")] * 3
    replies, reads = run(conn, clock, requests, pipelined)
    assert replies.count(b"\r\n") == 8
    assert usec(conn, b"addjob") == 5 * US and usec(conn, b"qlen") == 3 * US
    assert reads == (8 + 1 if pipelined else 2 * 8)


@pytest.mark.parametrize("pipelined", [False, True])
def test_serving_blocked_clients_counts_for_no_command(make, clock, monkeypatch, pipelined):
    node = make(**QUIET)
    waiter = node.connect()
    waiter.proto.dataReceived(cmd("GETJOB", "FROM", "q"))  # blocked
    serve = node.runtime.node.getjob.serve_ready

    def slow_serve():
        clock.now += EXTRA
        serve()

    monkeypatch.setattr(node.runtime.node.getjob, "serve_ready", slow_serve)
    conn = node.connect()
    run(conn, clock, [("ADDJOB", "q", "body", "0"), ("QLEN", "q"), ("QLEN", "q")], pipelined)
    assert waiter.take().startswith(b"*1\r\n")
    assert usec(conn, b"addjob") == US and usec(conn, b"qlen") == 2 * US


@pytest.mark.parametrize("pipelined", [False, True])
def test_the_slow_log_counts_for_no_command(make, clock, monkeypatch, pipelined):
    node = make(**{"slowlog-log-slower-than": "0"})
    slowlog = type(node.runtime.ctx.slowlog)
    add = slowlog.add

    def slow_add(*args):
        clock.now += EXTRA
        add(*args)

    monkeypatch.setattr(slowlog, "add", slow_add)
    conn = node.connect()
    conn.call("SLOWLOG", "RESET")
    run(conn, clock, [("QLEN", "q")] * 4, pipelined)
    assert usec(conn, b"qlen") == 4 * US
    assert [e[2] for e in slowlog_qlens(node)] == [US] * 4


@pytest.mark.parametrize("pipelined", [False, True])
def test_an_acl_refusal_counts_for_no_command(make, clock, monkeypatch, pipelined):
    node = make(user="alice on nopass ~a:* +@all", **QUIET)
    conn = node.connect()
    conn.call("AUTH", "alice", "x")
    refusal = dispatcher.refusal

    def slow_refusal(*args):
        clock.now += EXTRA
        return refusal(*args)

    monkeypatch.setattr(dispatcher, "refusal", slow_refusal)
    replies, _ = run(conn, clock, [("QLEN", "a:q"), ("QLEN", "b:q"), ("QLEN", "a:q")], pipelined)
    assert replies.count(b"-NOPERM") == 1
    assert usec(conn, b"qlen") == 2 * US


def test_a_command_outside_a_run_reads_its_own_start(make, clock):
    """Through the front door alone (as the HTTP side's actions come), a
    command never starts where an earlier one ended."""
    node = make(**QUIET)
    conn = node.connect()
    conn.call("CONFIG", "RESETSTAT")
    runtime = node.runtime
    for _ in range(3):
        runtime.run_command(conn.proto.client, [b"QLEN", b"q"])
        clock.now += EXTRA  # time passes between them
    assert usec(conn, b"qlen") == 3 * US
