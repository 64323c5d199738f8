"""The RESP adapter in memory: StringTransport + Clock, no sockets."""

from tests.support.memory import cmd, connect, make_runtime, take


def test_pipeline_is_answered_with_one_write():
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("PING") + b"PING\r\n" + cmd("QLEN", "q") + cmd("PING", "x"))
    assert take(tr) == b"+PONG\r\n+PONG\r\n:0\r\n$1\r\nx\r\n"
    assert tr.writes == 1


def test_blocked_getjob_parks_the_pipeline_until_served():
    runtime, clock = make_runtime()
    consumer, ctr = connect(runtime)
    producer, ptr = connect(runtime)
    consumer.dataReceived(cmd("GETJOB", "FROM", "q") + cmd("PING", "after"))
    assert take(ctr) == b""
    producer.dataReceived(cmd("ADDJOB", "q", "body", 0))
    job_id = take(ptr)[1:-2]
    assert len(job_id) == 40
    assert take(ctr) == (b"*1\r\n*3\r\n$1\r\nq\r\n$40\r\n" + job_id + b"\r\n$4\r\nbody\r\n"
                         b"$5\r\nafter\r\n")


def test_getjob_timeout_answers_null_array_on_the_clock():
    runtime, clock = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("GETJOB", "TIMEOUT", 250, "FROM", "q"))
    clock.advance(0.2)
    assert take(tr) == b""
    clock.advance(0.06)
    assert take(tr) == b"*-1\r\n"


def test_requeue_and_ttl_follow_the_clock():
    runtime, clock = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("ADDJOB", "q", "b", 0, "RETRY", 1, "TTL", 5))
    job_id = take(tr)[1:-2]
    proto.dataReceived(cmd("GETJOB", "NOHANG", "FROM", "q") + cmd("QLEN", "q"))
    assert take(tr).endswith(b":0\r\n")
    clock.advance(1.6)
    proto.dataReceived(cmd("QLEN", "q"))
    assert take(tr) == b":1\r\n"
    clock.advance(3.5)
    proto.dataReceived(cmd("SHOW", job_id) + cmd("QLEN", "q"))
    assert take(tr) == b"$-1\r\n:0\r\n"


def test_disconnected_blocked_client_takes_no_job():
    runtime, _ = make_runtime()
    consumer, _ = connect(runtime)
    consumer.dataReceived(cmd("GETJOB", "FROM", "q"))
    consumer.connectionLost(None)
    producer, ptr = connect(runtime)
    producer.dataReceived(cmd("ADDJOB", "q", "b", 0) + cmd("QLEN", "q"))
    assert take(ptr).endswith(b":1\r\n")


def test_protocol_error_after_good_commands_answers_them_then_closes():
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(b"PING\r\n*abc\r\n")
    assert take(tr) == b"+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"
    assert tr.disconnecting
    assert tr.writes == 1


def test_client_reply_off_skip_on():
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("CLIENT", "REPLY", "OFF") + cmd("PING"))
    assert take(tr) == b""
    proto.dataReceived(cmd("CLIENT", "REPLY", "ON") + cmd("CLIENT", "REPLY", "SKIP") + cmd("PING", "a") + cmd("PING", "b"))
    assert take(tr) == b"+OK\r\n$1\r\nb\r\n"


def test_maxclients_rejects_extra_connections():
    runtime, _ = make_runtime(maxclients="2")
    connect(runtime)
    connect(runtime)
    third, tr = connect(runtime)
    assert take(tr) == b"-ERR max number of clients reached\r\n"
    assert tr.disconnecting and runtime.ctx.stats.rejected == 1


def test_requirepass():
    runtime, _ = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("PING") + cmd("AUTH", "bad") + cmd("AUTH", "s3cret") + cmd("PING"))
    assert take(tr) == (b"-NOAUTH Authentication required.\r\n-ERR invalid password\r\n"
                        b"+OK\r\n+PONG\r\n")


def test_leaving_unblocks_waiting_consumers():
    runtime, _ = make_runtime()
    consumer, ctr = connect(runtime)
    admin, atr = connect(runtime)
    consumer.dataReceived(cmd("GETJOB", "FROM", "q"))
    admin.dataReceived(cmd("CLUSTER", "LEAVING", "yes"))
    assert take(atr) == b"+OK\r\n"
    assert take(ctr) == b"-LEAVING This node is leaving the cluster, please connect to a different one\r\n"


def test_exact_wake_ups_when_sooner_deadlines_come_after_later_ones():
    """The host skips recomputing its wake-up after a batch unless the core
    says a deadline may be sooner: a DELAY job or a GETJOB timeout added
    after far-future jobs must still wake the node on time (there is no
    periodic tick here, only the exact wake-up)."""
    runtime, clock = make_runtime()
    proto, tr = connect(runtime)
    for _ in range(3):
        proto.dataReceived(cmd("ADDJOB", "far", "x", "0"))  # requeue in 8640 s
    proto.dataReceived(cmd("ADDJOB", "soon", "y", "0", "DELAY", "1"))
    take(tr)
    clock.advance(1.011)
    proto.dataReceived(cmd("QLEN", "soon"))
    assert take(tr) == b":1\r\n"
    other, tr2 = connect(runtime)
    other.dataReceived(cmd("GETJOB", "TIMEOUT", "50", "FROM", "empty"))
    assert take(tr2) == b""
    clock.advance(0.051)
    assert take(tr2) == b"*-1\r\n"
    proto.dataReceived(cmd("ADDJOB", "soon2", "z", "0", "DELAY", "2"))
    take(tr)
    clock.advance(2.011)
    proto.dataReceived(cmd("QLEN", "soon2"))
    assert take(tr) == b":1\r\n"


def test_deadline_wake_ups_run_only_what_is_due(monkeypatch):
    """A wake-up for a deadline (here 200 blocked GETJOBs timing out one
    millisecond apart) runs the due work only: the periodic work (RSS read,
    idle queues, cluster cron) is the hz tick's.  Under load deadlines come
    every millisecond; running the whole tick each time cost a file read
    per request."""
    runtime, clock = make_runtime()
    periodic = []
    monkeypatch.setattr(runtime.node.queues, "reclaim_idle", lambda: periodic.append(1))
    monkeypatch.setattr("disque.node.facts._rss", lambda: periodic.append(1) or 0)
    clients = [connect(runtime) for _ in range(200)]
    for n, (proto, _) in enumerate(clients):
        proto.dataReceived(cmd("GETJOB", "TIMEOUT", str(10 + n), "FROM", "empty"))
    for _ in range(220):
        clock.advance(0.001)
    assert [take(tr) for _, tr in clients] == [b"*-1\r\n"] * 200
    assert periodic == []
    runtime.tick()
    assert len(periodic) == 2


def test_info_server_names_the_runtime_and_the_interpreters_compiler():
    import platform
    import re

    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("INFO", "server"))
    fields = dict(line.split(b":", 1) for line in take(tr).split(b"\r\n")[1:] if b":" in line)
    assert fields[b"runtime"] == ("%s %s" % (platform.python_implementation(), platform.python_version())).encode()
    built = re.search(r"GCC (\d+\.\d+\.\d+)", platform.python_compiler())
    assert fields[b"gcc_version"] == (built.group(1) if built else "0.0.0").encode()
    assert fields[b"gcc_version"] != platform.python_version().encode()


def test_info_server_shows_the_protocol_version_as_the_original_and_the_package_version_beside_it():
    from disque import DISQUE_VERSION, __version__

    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("INFO", "server"))
    lines = take(tr).split(b"\r\n")
    assert lines[2] == b"disque_version:1.0-rc1" == b"disque_version:" + DISQUE_VERSION.encode()
    assert b"package_version:" + __version__.encode() in lines
