"""maxmemory-clients in memory (protocol tier): what each connection holds
is counted as it changes, the running total never leaks, and past the
limit the biggest clients are closed until the total is under it again
(disque/node/client_memory.py)."""

import types

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from disque.node.client_memory import MIN_LIMIT, effective_limit
from disque.config import Share
from disque.http.metrics import render
from disque.io.batch_output import BatchOutput
from tests.support.storage_faults import FaultyFileSystem
from tests.support.memory import Node, captured_log, cmd, texts

KB = 1024


def partial(size):
    """The start of a PING whose argument is ``size`` bytes and more to come:
    what a client holds in the node's query buffer."""
    return b"*2\r\n$4\r\nPING\r\n$%d\r\n" % (size + 100 * KB) + b"x" * size


def stats(conn, section="stats"):
    text = conn.call("INFO", section)
    return dict(line.split(b":", 1) for line in text.split(b"\r\n") if b":" in line)


def test_the_limit_is_bytes_or_a_share_of_maxmemory_and_at_least_128kb():
    assert effective_limit(0, 1 << 30) == 0 and effective_limit(Share(0), 1 << 30) == 0
    assert effective_limit(Share(10), 10 * 1024 * KB) == 1024 * KB
    assert effective_limit(Share(10), 100 * KB) == MIN_LIMIT == 128 * KB
    assert effective_limit(1, 1 << 30) == MIN_LIMIT and effective_limit(1 << 20, 1) == 1 << 20


def test_held_output_is_summed_once_per_chunk_and_afresh_at_each_hold():
    class Connection(BatchOutput):
        runtime = types.SimpleNamespace(effects=types.SimpleNamespace(pending_output=[]))

    conn = Connection()
    conn.keep(b"ab")
    assert conn.held_bytes() == 0  # kept for this batch only: not held
    conn.hold()
    conn.keep(b"cde")
    assert conn.held_bytes() == 5
    conn.keep(b"f")
    assert conn.held_bytes() == 6
    conn.release()
    conn.take_output()
    conn.keep(b"x")
    conn.hold()
    assert conn.held_bytes() == 1


def test_past_the_limit_the_biggest_client_is_closed_not_the_one_that_tipped_it(make):
    node = make(**{"maxmemory-clients": "200kb"})
    big, medium, small, idle = (node.connect() for _ in range(4))
    big.proto.dataReceived(partial(120 * KB))
    medium.proto.dataReceived(partial(60 * KB))
    assert not big.closed and node.runtime.client_memory.total > 180 * KB
    with captured_log() as events:
        small.proto.dataReceived(partial(30 * KB))  # 210 KB together
    assert big.closed and big.tr.disconnected  # aborted: what it sent is dropped
    assert not (medium.closed or small.closed or idle.closed)
    assert idle.call("PING") == b"+PONG\r\n"
    assert 90 * KB < node.runtime.client_memory.total < 100 * KB
    lines = [t for t in texts(events) if "Evicting client" in t]
    assert len(lines) == 1 and "maxmemory-clients (204800 bytes)" in lines[0]
    assert stats(idle)[b"evicted_clients"] == b"1"
    total = node.runtime.client_memory.total
    assert stats(idle, "memory")[b"mem_clients_normal"] == b"%d" % total
    metrics = render(node.runtime).decode()
    assert "\ndisque_evicted_clients_total 1\n" in metrics and "\ndisque_client_memory_bytes %d\n" % total in metrics


def test_output_a_client_does_not_read_counts_monitors_included(make):
    node = make(**{"maxmemory-clients": "200kb"})
    monitor, producer = node.connect(), node.connect()
    monitor.call("MONITOR")
    monitor.proto.pauseProducing()  # its transport is full: it does not read
    for _ in range(8):  # 30 KB MONITOR lines: past 200 KB at the 7th
        producer.call("PING", "y" * 30 * KB)  # (its own replies are read)
        if not monitor.closed:
            monitor.proto.pauseProducing()  # as Twisted, at each write while full
    assert monitor.closed and not producer.closed
    assert node.runtime.client_memory.total == 0


def test_replies_held_while_the_aof_is_in_error_count(make):
    """Output of a turn whose records the AOF could not write is held, with
    all that follows on the same connections (NodeRuntime.held_output):
    nothing else bounds it.  A MONITOR held with the rest grows without
    reading anything itself."""
    node = make(appendonly="yes", **{"maxmemory-clients": "200kb"})
    fs = FaultyFileSystem()
    node.service.persistence.fs = fs
    reader, monitor, other = node.connect(), node.connect(), node.connect()
    assert reader.call("ADDJOB", "q", "b" * 40 * KB, "0").startswith(b"+D-")
    monitor.call("MONITOR")
    fs.full()
    reader.proto.dataReceived(cmd("ADDJOB", "q", "x", "0"))  # its record cannot be written
    assert reader.proto.held and monitor.proto.held  # (the MONITOR line of that turn too)
    for _ in range(3):
        reader.proto.dataReceived(cmd("QPEEK", "q", "1"))  # read: answered, held behind the ADDJOB
    other.call("QLEN", "n" * 60 * KB)  # a 60 KB MONITOR line, held
    assert reader.take() == b"" and monitor.take() == b""
    assert 180 * KB < node.runtime.client_memory.total < 200 * KB and not monitor.closed
    other.call("QLEN", "n" * 60 * KB)
    assert monitor.closed and not reader.closed and not other.closed  # the biggest: 120 KB of lines
    assert other.call("QLEN", "q") == b":2\r\n"
    fs.free()
    node.advance(0.2)  # a tick writes the records: what was held leaves
    assert reader.take().count(b"b" * 40 * KB) == 3 and node.runtime.client_memory.total == 0


def test_requests_waiting_behind_a_parked_command_count(make):
    node = make(**{"maxmemory-clients": "200kb"})
    parked, producer = node.connect(), node.connect()
    parked.proto.dataReceived(cmd("CLIENT", "REPLY", "OFF") + cmd("GETJOB", "FROM", "q"))  # parks
    for _ in range(3):
        parked.proto.dataReceived(cmd("PING", "z" * 60 * KB))  # waits behind it
    assert not parked.closed and 180 * KB < node.runtime.client_memory.total < 200 * KB
    producer.call("ADDJOB", "q", "j", "0")  # the parked client goes on (and answers nothing)
    assert node.runtime.client_memory.total == 0
    parked.proto.dataReceived(cmd("GETJOB", "FROM", "q"))
    for _ in range(4):
        parked.proto.dataReceived(cmd("PING", "z" * 60 * KB))
    assert parked.closed


def test_replies_waiting_behind_a_late_one_count(make):
    """A wrong AUTH from a source that failed too often is answered late
    (disque.access.failed_auth): the replies of the requests behind it wait."""
    node = make(user="alice on >pw ~* +@all", **{"maxmemory-clients": "200kb"})
    client = node.connect()
    while client.proto.slots is None:
        client.call("AUTH", "alice", "guess")
    for _ in range(3):
        client.proto.dataReceived(cmd("PING", "r" * 60 * KB))
    assert client.take() == b"" and 180 * KB < node.runtime.client_memory.total < 200 * KB
    node.reactor.advance(5)  # the late reply, then the ones behind it
    assert client.take().count(b"r" * 60 * KB) == 3 and node.runtime.client_memory.total == 0
    while client.proto.slots is None:
        client.call("AUTH", "alice", "guess")
    for _ in range(4):
        client.proto.dataReceived(cmd("PING", "r" * 60 * KB))
    assert client.closed


def test_a_no_evict_client_is_never_closed(make):
    node = make(**{"maxmemory-clients": "200kb"})
    spared, other = node.connect(), node.connect()
    assert spared.call("CLIENT", "NO-EVICT", "on") == b"+OK\r\n"
    assert spared.call("CLIENT", "NO-EVICT", "maybe").startswith(b"-ERR Syntax error")
    spared.proto.dataReceived(partial(150 * KB))
    other.proto.dataReceived(partial(60 * KB))
    assert other.closed and not spared.closed  # the biggest but one
    node.connect().proto.dataReceived(partial(1))  # still over: nothing left to close
    spared.proto.dataReceived(b"x" * 60 * KB)
    assert not spared.closed and node.runtime.client_memory.total > 200 * KB
    spared.proto.client.no_evict = False  # as CLIENT NO-EVICT off would (its request is not over)
    spared.proto.dataReceived(b"x")  # the total grows: the clients are looked at again
    assert spared.closed


def test_setting_the_limit_at_run_time_counts_the_connected_clients_and_zero_stops_counting(make):
    node = make()
    admin, holder = node.connect(), node.connect()
    holder.proto.dataReceived(partial(150 * KB))
    memory = node.runtime.client_memory
    assert memory.limit == 0 and memory.total == 0 and b"evicted_clients" not in admin.call("INFO")
    assert admin.call("CONFIG", "SET", "maxmemory-clients", "1mb") == b"+OK\r\n"
    assert memory.total == holder.proto.memory() > 150 * KB and holder.proto.counted == memory.total
    assert b"evicted_clients:0\r\n" in admin.call("INFO")
    admin.call("CONFIG", "SET", "maxmemory-clients", "0")
    assert memory.total == 0 and holder.proto.counted == 0
    holder.proto.dataReceived(b"x" * 10 * KB)
    assert memory.total == 0  # nothing is counted without a limit


# -- the running total never leaks --------------------------------------------------

class ClientMemoryMachine(RuleBasedStateMachine):
    """Random clients growing and shrinking their query buffers, parking,
    not reading, watching MONITOR, leaving, being evicted.  After every
    step the total is the sum of what the connected clients were last
    counted for, each of those is what the client holds now, and (with a
    limit) the total is under it."""

    LIMIT = "256kb"

    def __init__(self):
        super().__init__()
        import tempfile

        self.node = Node(tempfile.mkdtemp(prefix="cm-"), {"maxmemory-clients": self.LIMIT, "appendonly": "no"})
        self.conns = []

    def teardown(self):
        for conn in self.conns:
            if not conn.proto.closing:
                conn.proto.connectionLost(None)
        assert self.node.runtime.client_memory.total == 0
        self.node.service.stopService()

    def _live(self):
        return [c for c in self.conns if not c.proto.closing]

    def _reap(self):
        """The reactor's part: connections aborted by a limit are lost."""
        for conn in self.conns:
            if conn.proto.closing and conn.proto.client is not None:
                conn.proto.connectionLost(None)

    @rule()
    def connect(self):
        if len(self._live()) < 6:
            self.conns.append(self.node.connect())

    @precondition(lambda self: self._live())
    @rule(data=st.data(), size=st.integers(1, 90 * KB))
    def send_part_of_a_request(self, data, size):
        conn = data.draw(st.sampled_from(self._live()))
        if conn.proto.parser.held() == 0:
            conn.proto.dataReceived(b"*2\r\n$4\r\nPING\r\n$%d\r\n" % (200 * KB))
        conn.proto.dataReceived(b"x" * min(size, 200 * KB - conn.proto.parser.held() + 30))
        self._reap()

    @precondition(lambda self: self._live())
    @rule(data=st.data(), n=st.integers(1, 40 * KB))
    def send_whole_requests(self, data, n):
        conn = data.draw(st.sampled_from(self._live()))
        if conn.proto.parser.held() == 0:
            conn.proto.dataReceived(cmd("PING", "p" * n) + cmd("QLEN", "q"))
        self._reap()

    @precondition(lambda self: self._live())
    @rule(data=st.data(), which=st.sampled_from(["GETJOB", "MONITOR", "ADDJOB", "REPLY OFF"]))
    def command(self, data, which):
        conn = data.draw(st.sampled_from(self._live()))
        if conn.proto.parser.held() or conn.proto.client.monitor:
            return
        args = {"GETJOB": ("GETJOB", "TIMEOUT", "5000", "FROM", "q"), "MONITOR": ("MONITOR",),
                "ADDJOB": ("ADDJOB", "q", "j" * 10 * KB, "0"), "REPLY OFF": ("CLIENT", "REPLY", "OFF")}[which]
        conn.proto.dataReceived(cmd(*args))
        self._reap()

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def stop_reading(self, data):
        data.draw(st.sampled_from(self._live())).proto.pauseProducing()

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def read_again(self, data):
        conn = data.draw(st.sampled_from(self._live()))
        conn.take()
        conn.proto.resumeProducing()
        self._reap()

    @precondition(lambda self: self._live())
    @rule(data=st.data())
    def leave(self, data):
        data.draw(st.sampled_from(self._live())).proto.connectionLost(None)

    @rule()
    def time_passes(self):
        self.node.reactor.advance(1.0)
        self._reap()

    @invariant()
    def total_is_what_the_clients_hold(self):
        runtime = self.node.runtime
        memory = runtime.client_memory
        clients = list(runtime.ctx.clients.values())
        assert memory.total == sum(c.conn.counted for c in clients)
        for c in clients:
            if not c.conn.closing:
                assert c.conn.counted == c.conn.memory()
        assert memory.total <= memory.limit


class ClientMemoryWithoutEvictionMachine(ClientMemoryMachine):
    LIMIT = "1gb"


settings_ = settings(max_examples=40, stateful_step_count=30, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])
TestClientMemory = pytest.mark.filterwarnings("ignore")(ClientMemoryMachine.TestCase)
TestClientMemory.settings = settings_
TestClientMemoryWithoutEviction = ClientMemoryWithoutEvictionMachine.TestCase
TestClientMemoryWithoutEviction.settings = settings_
