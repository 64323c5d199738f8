"""A big AOF loaded in the reactor, in memory (MemoryReactorClock,
StringTransport): slices between reactor turns, ``-LOADING`` for clients
but for the original's ``loading`` commands, INFO's progress fields, the
bus and the tick held back until the jobs are all there, a file found bad
half way, SHUTDOWN while loading."""

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport

from disque.node import loading as loading_module
from disque.core.node import NodeState
from disque.interfaces import LoadError
from disque.persistence import aof, load, records
from disque.node.service import DisqueNodeService
from tests.support.deferreds import failureResultOf
from tests.support.memory import cmd, connect as protocol_connect, memory_config

T0 = 1_795_347_500.0
LOADING = b"-LOADING Disque is loading the dataset in memory\r\n"


def write_aof(path, n, queue=b"lq"):
    """``n`` LOADJOB records (as the node writes them); returns the job IDs."""
    node = NodeState(b"a" * 40, now=int(T0 * 1000))
    ids = []
    with open(path, "wb") as f:
        for i in range(n):
            job = node.addjob.add(queue, b"body-%d" % i, 1, 0, 30, 3600, 0, False)
            ids.append(job.id)
            f.write(records.record_bytes((b"LOADJOB", job)))
    return ids


def make_service(tmp_path, n=1000, persistence="aof:sync-load-max=0", **overrides):
    ids = write_aof(tmp_path / "disque.aof", n) if n else []
    config = memory_config({"dir": str(tmp_path), "port": "7711", "appendonly": "yes", "appendfsync": "no",
                            "persistence": persistence, **overrides})
    reactor = MemoryReactorClock()
    reactor.advance(T0)
    stopped = []
    service = DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: stopped.append(True))
    return service, reactor, ids, stopped


@pytest.fixture
def one_clock_look_per_slice(monkeypatch):
    """Slices of no time: each applies load.CLOCK_EVERY records (the
    records between two looks at the clock), whatever the machine."""
    monkeypatch.setattr(loading_module, "LOAD_SLICE", 0)


def turn(reactor):
    """One reactor turn: the delayed calls due now, not those they add (as
    the real reactor's runUntilCurrent; Clock.advance(0) would run every
    slice of the load at once)."""
    due = [c for c in reactor.getDelayedCalls() if c.getTime() <= reactor.seconds()]
    for call in due:
        if call.active():
            reactor.calls.remove(call)
            call.called = True
            call.func(*call.args, **call.kw)


def connect(service):
    return protocol_connect(service.runtime)


def ask(conn, *args):
    proto, transport = conn
    transport.clear()
    proto.dataReceived(cmd(*args))
    return transport.value()


def info(conn, section="persistence"):
    text = ask(conn, "INFO", section).split(b"\r\n", 1)[1].decode()
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def test_a_big_aof_loads_in_slices_while_clients_get_loading(tmp_path, one_clock_look_per_slice):
    service, reactor, ids, _ = make_service(tmp_path, n=1000)
    assert service.loading and len(service.node.jobs) == 0  # nothing read before the service runs
    service.startService()
    try:
        assert sorted(p[0] for p in reactor.tcpServers) == [7711, 17711]  # clients served at once
        conn = connect(service)
        # Only the original's "loading" commands run; the usual errors come first.
        assert ask(conn, "ADDJOB", "lq", "x", 0) == LOADING
        assert ask(conn, "GETJOB", "NOHANG", "FROM", "lq") == LOADING
        assert ask(conn, "PING") == LOADING
        assert ask(conn, "HELLO") == LOADING
        assert ask(conn, "NOSUCH") == b"-ERR unknown command 'NOSUCH'\r\n"
        assert ask(conn, "QLEN") == b"-ERR wrong number of arguments for 'qlen' command\r\n"
        assert ask(conn, "COMMAND", "COUNT").startswith(b":")
        assert ask(conn, "LATENCY", "LATEST") == b"*0\r\n"
        assert ask(conn, "AUTH", "x") == b"-ERR Client sent AUTH, but no password is set\r\n"
        # The bus is bound but closes peers' connections; no tick, no timer.
        bus_factory = [p[1] for p in reactor.tcpServers if p[0] == 17711][0]
        peer = bus_factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555))
        peer.makeConnection(StringTransport())
        assert peer.transport.disconnected
        assert not service.cron.running and service.runtime._wake is None
        assert not service.node.persist  # nothing of the load written back to the file

        seen = []
        slices = 0
        while service.loading:
            fields = info(conn)
            assert fields["loading"] == "1" and service.runtime._wake is None  # nothing due before the end
            seen.append(int(fields["loading_loaded_bytes"]))
            assert int(fields["loading_loaded_records"]) == min(slices * load.CLOCK_EVERY, 1000)
            assert fields["loading_total_bytes"] == str((tmp_path / "disque.aof").stat().st_size)
            # (100% of the bytes in the last slice: the jobs are made active then)
            assert 0 <= float(fields["loading_loaded_perc"]) <= 100 and int(fields["loading_eta_seconds"]) >= 0
            turn(reactor)  # one slice
            slices += 1
        # 8 slices of records, one per turn, then one to make the jobs active
        # (Jobs.finishing_load, FINISH_LOAD_STEP jobs a step: all 1000 here)
        assert slices == -(-1000 // load.CLOCK_EVERY) + 1
        assert seen == sorted(seen) and len(set(seen)) == len(seen)  # growing at every turn
        assert service.when_loaded().called

        fields = info(conn)
        assert fields["loading"] == "0" and not any(k.startswith("loading_") for k in fields)
        assert ask(conn, "PING") == b"+PONG\r\n"
        assert info(conn, "jobs")["registered_jobs"] == "1000"
        assert ask(conn, "SHOW", ids[-1]).startswith(b"*")
        assert ask(conn, "ADDJOB", "lq", "after", 0).startswith(b"+D-")
        assert service.cron.running and service.node.persist
        assert bus_factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 5555)) is not None
    finally:
        service.stopService()
    with open(tmp_path / "disque.aof", "rb") as f:
        assert f.read().count(b"LOADJOB") == 1001  # the file plus the one ADDJOB after the load


def metrics(service):
    """The /metrics exposition's samples without labels: {name: value}."""
    from disque.http.metrics import render

    lines = render(service.runtime).decode().splitlines()
    return {line.split(" ")[0]: float(line.split(" ")[1]) for line in lines if line and not line.startswith("#")
            and "{" not in line}


def test_metrics_show_the_progress_of_a_load_and_of_a_rewrite(tmp_path, one_clock_look_per_slice):
    service, reactor, ids, _ = make_service(tmp_path, n=1000, persistence="aof:sync-load-max=0,rewrite-step=100")
    service.startService()
    try:
        m = metrics(service)
        assert m["disque_loading"] == 1 and m["disque_loading_progress_ratio"] == 0
        assert m["disque_loading_eta_seconds"] == 1  # nothing known yet
        assert "disque_aof_last_rewrite_duration_seconds" not in m  # no rewrite yet
        ratios = []
        while service.loading:
            turn(reactor)
            m = metrics(service)
            ratios.append(m.get("disque_loading_progress_ratio"))
        # gone with the load; 1 while the loaded jobs are made active (the last slice)
        assert ratios[-1] is None and 0 < ratios[0] < ratios[-3] < 1 and ratios[-2] == 1
        assert m["disque_loading"] == 0 and "disque_loading_eta_seconds" not in m
        assert "disque_aof_rewrite_progress_ratio" not in m
        conn = connect(service)
        assert ask(conn, "BGREWRITEAOF") == b"+Background append only file rewriting started\r\n"
        m = metrics(service)  # one step of 100 jobs done
        assert 0.1 <= m["disque_aof_rewrite_progress_ratio"] < 1 and m["disque_aof_rewrite_eta_seconds"] >= 0
        while service.persistence.rewriting is not None:
            turn(reactor)
        m = metrics(service)
        assert "disque_aof_rewrite_progress_ratio" not in m and "disque_aof_rewrite_eta_seconds" not in m
        assert m["disque_aof_last_rewrite_duration_seconds"] == 0
    finally:
        service.stopService()


def test_noauth_comes_before_loading_and_auth_works_while_loading(tmp_path, one_clock_look_per_slice):
    service, reactor, _, _ = make_service(tmp_path, n=500, requirepass="secret")
    service.startService()
    try:
        conn = connect(service)
        assert ask(conn, "INFO").startswith(b"-NOAUTH")
        assert ask(conn, "ADDJOB", "lq", "x", 0).startswith(b"-NOAUTH")
        assert ask(conn, "AUTH", "secret") == b"+OK\r\n"
        assert ask(conn, "ADDJOB", "lq", "x", 0) == LOADING
        assert info(conn)["loading"] == "1"
    finally:
        service.stopService()


def test_a_small_file_is_loaded_before_the_node_listens(tmp_path):
    service, reactor, ids, _ = make_service(tmp_path, n=200, persistence="aof")  # far below 1 MB
    assert not service.loading and len(service.node.jobs) == 200
    service.startService()
    try:
        assert service.when_loaded().called and service.cron.running
        assert ask(connect(service), "PING") == b"+PONG\r\n"
    finally:
        service.stopService()


def test_a_file_found_bad_half_way_stops_the_node(tmp_path, one_clock_look_per_slice):
    path = tmp_path / "disque.aof"
    write_aof(path, 600)
    data = path.read_bytes()
    cut = data.index(b"*3\r\n$7\r\nLOADJOB", len(data) // 2)
    path.write_bytes(data[:cut] + b"GARBAGE!\r\n" + data[cut:])
    service, reactor, _, stopped = make_service(tmp_path, n=0)
    loaded = service.when_loaded()
    service.startService()
    try:
        conn = connect(service)
        for _ in range(20):
            reactor.advance(0)
        assert stopped == [True] and not service.loading
        error = failureResultOf(loaded, LoadError).value
        assert "offset %d" % cut in str(error) and "check_aof" in str(error)
        assert ask(conn, "ADDJOB", "lq", "x", 0) == LOADING  # the half loaded state is never served
        assert path.read_bytes()[cut:cut + 8] == b"GARBAGE!"  # the file is left for the tool
    finally:
        service.stopService()


def test_shutdown_rewrite_aof_while_loading_leaves_the_file_as_it_is(tmp_path, one_clock_look_per_slice):
    service, reactor, _, stopped = make_service(tmp_path, n=1000)
    before = (tmp_path / "disque.aof").read_bytes()
    service.startService()
    try:
        conn = connect(service)
        turn(reactor)
        turn(reactor)
        assert 0 < len(service.node.jobs) < 1000
        assert ask(conn, "SHUTDOWN", "REWRITE-AOF") == b""  # the connection closes with the process
        for _ in range(20):
            reactor.advance(0)
        assert stopped == [True]
        assert len(service.node.jobs) < 1000 and service.persistence.loading is None  # the load stopped
    finally:
        service.stopService()
    assert (tmp_path / "disque.aof").read_bytes() == before  # half the state never replaced it


def test_stopping_while_loading_abandons_the_load(tmp_path, one_clock_look_per_slice):
    service, reactor, _, _ = make_service(tmp_path, n=1000)
    service.startService()
    turn(reactor)
    service.stopService()
    assert service.persistence.loading is None and not reactor.getDelayedCalls()


def test_a_big_file_with_damage_half_way_loads_without_it_with_the_skip_policy(tmp_path, one_clock_look_per_slice):
    path = tmp_path / "disque.aof"
    ids = write_aof(path, 600)
    data = bytearray(path.read_bytes())
    victim = ids[400]
    at = data.index(victim) + 40 + 4 + len(b"lq") + 4  # its body (disque.core.job.serialize)
    data[at] ^= 0x10
    path.write_bytes(bytes(data))
    service, reactor, _, stopped = make_service(tmp_path, n=0, **{"aof-load-damaged": "skip"})
    service.startService()
    try:
        conn = connect(service)
        slices = 0
        while service.loading:
            turn(reactor)
            slices += 1
        assert slices > 1 and stopped == []  # loaded in slices, and the node serves
        fields = info(conn)
        assert fields["aof_load_damaged_records"] == "1" and fields["loading"] == "0"
        assert info(conn, "jobs")["registered_jobs"] == "599"
        assert ask(conn, "SHOW", victim) == b"$-1\r\n" and ask(conn, "SHOW", ids[401]).startswith(b"*")
        assert service.persistence.rewriting is None  # the rewrite after the load: one step
    finally:
        service.stopService()
    assert victim not in path.read_bytes() and path.read_bytes().count(b"LOADJOB") == 599
