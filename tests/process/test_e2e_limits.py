"""Each limit of docs/limits.md against a real node process, with a hostile
client or peer on raw sockets: what it is answered, that it is closed, that
the node's memory stays bounded and everyone else is still served.  The
in-memory tests of the same limits are in test_directives, test_resp_codec
and test_bus_protocol."""

import os
import signal
import socket
import struct
import time

import pytest

from tests.support.process import Client, NodeProcess, call, info, read_until_closed, show, start_cluster, wait_for

MB = 1024 * 1024


def rss(node) -> int:
    """The node process's resident memory, in bytes."""
    with open("/proc/%d/status" % node.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def flood(sock, data, seconds):
    """Send ``data`` without ever reading, for at most ``seconds``; return
    (bytes the kernel took, whether the node closed the connection)."""
    sock.setblocking(False)
    sent, deadline = 0, time.time() + seconds
    while sent < len(data) and time.time() < deadline:
        try:
            sent += sock.send(data[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)
        except (BrokenPipeError, ConnectionResetError):
            return sent, True
    return sent, False


def closed_by_node(sock, data, seconds=8.0):
    """Send ``data`` and read until the node closes: (what it sent back, the
    bytes taken before it closed)."""
    sent, _ = flood(sock, data, seconds)
    got, closed = read_until_closed(sock, timeout=seconds)
    assert closed, "still connected after %d bytes" % sent
    return got, sent


@pytest.fixture(scope="module")
def lnode(tmp_path_factory):
    n = NodeProcess(tmp_path_factory.mktemp("limits"), args=[
        "--set", "client-query-buffer-limit=2mb", "--set", "proto-max-bulk-len=1mb"]).start()
    yield n
    n.stop()


def healthy(node):
    c = node.client()
    try:
        assert c.call("PING") == b"PONG"
        assert node.proc.poll() is None
        log = node.log()
        assert "Traceback" not in log and "Unhandled" not in log, log[-3000:]
    finally:
        c.close()


# -- what a client's requests may hold -------------------------------------------

QUERY_FLOODS = {
    # many arguments each under proto-max-bulk-len: each leaves the unparsed
    # buffer once read, but the request holds them all
    "big-arguments": b"*100\r\n$4\r\nPING\r\n" + (b"$900000\r\n" + b"a" * 900000 + b"\r\n") * 21,
    # the most arguments a request may announce, each empty, one missing
    "endless-multibulk": b"*1048576\r\n" + b"$0\r\n\r\n" * 1_048_575,
    # requests behind a parked GETJOB wait unparsed-but-held
    "behind-a-parked-getjob": Client.encode("GETJOB", "FROM", "nothing-here")
                              + Client.encode("PING", "p" * 500_000) * 40,
}


@pytest.mark.parametrize("name", sorted(QUERY_FLOODS))
def test_a_client_holding_more_than_the_query_buffer_limit_is_closed(lnode, name):
    """Without the limit, each would wait for the rest of its requests."""
    before, lines = rss(lnode), lnode.log().count("max query buffer length")
    s = socket.create_connection(("127.0.0.1", lnode.port))
    got, _ = closed_by_node(s, QUERY_FLOODS[name])
    s.close()
    assert got == b""                                  # closed, not answered: as the original
    wait_for(lambda: lnode.log().count("max query buffer length") == lines + 1, what="the log line")
    assert rss(lnode) - before < 64 * MB
    healthy(lnode)


PROTOCOL_ERRORS = {
    "bulk-over-proto-max-bulk-len": (b"*2\r\n$4\r\nPING\r\n$1048577\r\n", b"invalid bulk length"),
    "multibulk-count-too-big": (b"*1048577\r\n", b"invalid multibulk length"),
    "endless-inline-line": (b"PING " + b"x" * 200_000, b"too big inline request"),
    "endless-multibulk-count": (b"*" + b"1" * 200_000, b"too big mbulk count string"),
    "endless-bulk-count": (b"*1\r\n$" + b"1" * 200_000, b"too big bulk count string"),
}


@pytest.mark.parametrize("name", sorted(PROTOCOL_ERRORS))
def test_a_request_past_a_protocol_limit_is_refused_with_the_redis_error(lnode, name):
    """Sent in 1 KB pieces (the node gets the line over many reads)."""
    data, error = PROTOCOL_ERRORS[name]
    s = socket.create_connection(("127.0.0.1", lnode.port))
    s.settimeout(5)
    for i in range(0, len(data), 1024):
        try:
            s.sendall(data[i:i + 1024])
        except (BrokenPipeError, ConnectionResetError):
            break
    got, closed = read_until_closed(s)
    s.close()
    assert (got, closed) == (b"-ERR Protocol error: " + error + b"\r\n", True)
    healthy(lnode)


def test_a_client_that_has_not_authenticated_gets_redis_pre_auth_limits(tmp_path):
    """With requirepass: a bulk over 16384 bytes or more than 10 arguments
    before AUTH get Redis' errors at the header, however the rest trickles
    in; after AUTH in the same pipeline, big requests are served."""
    node = NodeProcess(tmp_path, args=["--requirepass", "s3cret"]).start()
    try:
        for data, error in ((b"*1\r\n$100000000\r\n" + b"x" * 500_000, b"unauthenticated bulk length"),
                            (b"*100\r\n" + b"$1\r\nx\r\n" * 100, b"unauthenticated multibulk length")):
            s = socket.create_connection(("127.0.0.1", node.port))
            got, _ = closed_by_node(s, data)
            s.close()
            assert got == b"-ERR Protocol error: " + error + b"\r\n"
        c = node.client()
        c.send(Client.encode("AUTH", "s3cret") + Client.encode("ADDJOB", "q", "x" * 100_000, "0"))
        assert c.read() == b"OK" and c.read().startswith(b"D-")
        c.close()
        c = node.client()
        assert c.call("AUTH", "s3cret") == b"OK"
        assert c.call("PING") == b"PONG"
        c.close()
    finally:
        node.stop()


def test_a_big_argument_trickled_in_is_taken_and_a_bigger_one_refused(lnode):
    c = lnode.client()
    body = os.urandom(MB // 2) * 2                      # exactly proto-max-bulk-len
    request = Client.encode("ADDJOB", "trickled", body, "0")
    for i in range(0, len(request), 100_000):
        c.send(request[i:i + 100_000])
        time.sleep(0.01)
    job_id = c.read()
    assert show(lnode, job_id)[b"state"] == b"queued"
    assert c.call("ACKJOB", job_id) == 1
    got, _ = closed_by_node(c.sock, Client.encode("ADDJOB", "trickled", body + b"!", "0"))
    assert got == b"-ERR Protocol error: invalid bulk length\r\n"
    healthy(lnode)


# -- what a client's replies may hold ----------------------------------------------

def test_a_client_asking_for_big_replies_without_reading_stops_being_served(tmp_path):
    """Default limits (none): 50,000 SHOWs of a 1 MB job ask for 50 GB of
    replies.  The node runs a few, then waits for the client to read; its
    memory stays bounded and the others are served."""
    node = NodeProcess(tmp_path / "node").start()
    try:
        admin = node.client()
        job_id = admin.call("ADDJOB", "big", os.urandom(MB // 2) * 2, "0").decode()
        before, processed = rss(node), int(info(admin, "stats")["total_commands_processed"])
        hog = socket.create_connection(("127.0.0.1", node.port))
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sent, closed = flood(hog, Client.encode("SHOW", job_id) * 50_000, 3.0)
        assert not closed
        ran = int(info(admin, "stats")["total_commands_processed"]) - processed
        assert ran < 100, "ran %d SHOWs for a client that does not read" % ran
        assert rss(node) - before < 100 * MB, "grew by %d MB" % ((rss(node) - before) >> 20)
        assert admin.call("PING") == b"PONG" and admin.call("QLEN", "big") == 1
        clients = admin.call("CLIENT", "LIST").decode()
        assert clients.count("\n") == 2                 # the hog waits, still connected
        hog.close()
    finally:
        node.stop()


def test_a_monitor_that_does_not_read_is_dropped_at_the_hard_limit(tmp_path):
    node = NodeProcess(tmp_path / "node", args=["--set", "client-output-buffer-limit=normal 2mb 0 0"]).start()
    try:
        monitor = socket.create_connection(("127.0.0.1", node.port))
        monitor.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        monitor.sendall(Client.encode("MONITOR"))
        admin = node.client()
        wait_for(lambda: "monitor" in admin.call("CLIENT", "LIST").decode(), what="the MONITOR")
        body = "m" * 100_000
        for _ in range(400):                              # 40 MB of MONITOR lines
            admin.call("ADDJOB", "watched", body, "0")
            if "output buffer limits" in node.log():
                break
        wait_for(lambda: "output buffer limits" in node.log(), what="the MONITOR dropped")
        assert admin.call("QLEN", "watched") > 0 and admin.call("PING") == b"PONG"
        _, closed = read_until_closed(monitor, timeout=10)
        assert closed
        monitor.close()
    finally:
        node.stop()


def test_the_biggest_client_is_evicted_past_maxmemory_clients_and_the_others_served(tmp_path):
    """A client pipelining SHOWs of a 300 KB job without reading its replies
    holds up to a batch of them (1 MB) once the kernel's and Twisted's
    buffers are full: past maxmemory-clients it is closed, logged and
    counted, and a client that reads its replies keeps working."""
    node = NodeProcess(tmp_path / "node", args=["--set", "maxmemory-clients=512kb"]).start()
    try:
        normal = node.client()
        job_id = normal.call("ADDJOB", "big", "j" * 300_000, "0").decode()
        hog = socket.create_connection(("127.0.0.1", node.port))
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        closed_by_node(hog, Client.encode("SHOW", job_id) * 10_000)  # 3 GB of replies asked for
        hog.close()
        wait_for(lambda: "Evicting client" in node.log(), what="the eviction logged")
        assert info(normal, "stats")["evicted_clients"] == "1"
        assert int(info(normal, "memory")["mem_clients_normal"]) < 512 * 1024
        assert normal.call("PING") == b"PONG" and normal.call("QLEN", "big") == 1
    finally:
        node.stop()


# -- idle clients, keepalive ----------------------------------------------------------

def test_idle_clients_are_closed_and_waiting_ones_kept(tmp_path):
    node = NodeProcess(tmp_path / "node", args=["--set", "timeout=1"]).start()
    try:
        idle, waiting, monitor = node.client(), node.client(), node.client()
        assert idle.call("PING") == b"PONG"
        waiting.send(Client.encode("GETJOB", "TIMEOUT", "0", "FROM", "never"))
        assert monitor.call("MONITOR") == b"OK"
        assert idle.closed_within(8.0)
        assert waiting.nothing_within(0.2)               # still parked, still connected
        job_id = call(node, "ADDJOB", "never", "x", "0")
        assert waiting.read()[0][1] == job_id
    finally:
        node.stop()


def _keepalive_timer(node, client):
    """The node's end of ``client``'s connection in /proc/net/tcp: (timer
    kind, seconds to its expiry).  Kind 2 on an idle socket is keepalive."""
    local = client.sock.getsockname()[1]
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            lport = int(fields[1].split(":")[1], 16)
            rport = int(fields[2].split(":")[1], 16)
            if lport == node.port and rport == local:
                kind, when = fields[5].split(":")
                return int(kind, 16), int(when, 16) / os.sysconf("SC_CLK_TCK")
    raise AssertionError("no such connection in /proc/net/tcp")


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="needs Linux's /proc/net/tcp")
def test_tcp_keepalive_arms_the_timer_of_accepted_connections(tmp_path):
    node = NodeProcess(tmp_path / "node", args=["--set", "tcp-keepalive=60"]).start()
    try:
        c = node.client()
        assert c.call("PING") == b"PONG"
        time.sleep(0.3)                                    # past any delayed ACK
        kind, seconds = _keepalive_timer(node, c)
        assert kind == 2 and 30 < seconds <= 60
        assert c.call("CONFIG", "SET", "tcp-keepalive", "no") == b"OK"
        late = node.client()
        assert late.call("PING") == b"PONG"
        time.sleep(0.3)
        assert _keepalive_timer(node, late)[0] == 0      # no timer at all
    finally:
        node.stop()


# -- the cluster bus -----------------------------------------------------------------

def test_a_stranger_on_the_bus_port_is_dropped(lnode):
    bus = ("127.0.0.1", lnode.port + 10000)
    for data in (struct.pack(">I", 0xFFFFFFFF),          # a 4 GB frame announced
                 struct.pack(">I", 2 * MB) + b"x" * 1000,  # over 1 MB before saying who it is
                 struct.pack(">I", 100) + b"y" * 100):     # not the bus protocol
        s = socket.create_connection(bus)
        s.sendall(data)
        assert read_until_closed(s) == (b"", True)
        s.close()
    assert "frame of 4294967295 bytes" in lnode.log() and "frame of 2097152 bytes" in lnode.log()
    healthy(lnode)


def test_a_peer_that_stops_reading_loses_its_link_and_no_job(tmp_path):
    """B stops (SIGSTOP): A's REPLJOBs of a 1 MB job, every 50 ms, pile up
    for it.  Past cluster-link-sendbuf-limit the link is dropped (and
    reconnects); once B runs again it gets the job."""
    a, b = start_cluster(tmp_path, 2, args=["--set", "cluster-link-sendbuf-limit=4mb"])
    try:
        before = rss(a)
        b.proc.send_signal(signal.SIGSTOP)
        try:
            job_id = call(a, "ADDJOB", "q", os.urandom(MB // 2) * 2, "0", "REPLICATE", "2", "ASYNC").decode()
            wait_for(lambda: "cluster-link-sendbuf-limit" in a.log(), timeout=15, what="the link dropped")
            assert rss(a) - before < 200 * MB
            assert call(a, "PING") == b"PONG"
        finally:
            b.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: call(b, "SHOW", job_id) is not None, timeout=20, what="B to get the job")
        assert call(a, "SHOW", job_id) is not None
    finally:
        for n in (a, b):
            n.stop()
