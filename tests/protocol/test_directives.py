"""Every directive the config accepts does something: one test per
directive, each showing a node behave differently with another value.

``EFFECTS`` maps each directive to its test; a directive added to
``disque.config.SPECS`` without an entry here fails
``test_every_directive_has_an_effect_test``.  Fixed directives (not
implemented, ``Spec.fixed``) have no effect to show: their test is that any
other value is refused, at start-up and by CONFIG SET.

Nodes are whole DisqueNodeService objects on a MemoryReactorClock (no
sockets, no real time), with RespProtocol clients on string transports.
"""

import gc
import os
import re
import socket
import sys
import time
from contextlib import contextmanager

import pytest
from twisted.internet.testing import StringTransport

from disque.io import files
from disque.config import SPECS, Config, ConfigError
from disque.core.job import QUEUED
from disque.core.node import NodeState
from disque.persistence import aof, records, rewrite
from disque.persistence.aof import AOFPersistence
from disque.persistence.records import AOFError
from disque.persistence.none import NoPersistence
from disque.plugins import StrategyError
from disque.node.timers import BANNER
from tests.support.memory import (LOCAL_PEER, NOAUTH, T0, Conn, FakeSyslog, captured_log, cmd, texts,
                                  ticks_in_one_second)


EFFECTS = {}


def effect(*names):
    def register(fn):
        for name in names:
            EFFECTS[name] = fn
        return fn
    return register


# -- clients, commands ---------------------------------------------------------

@effect("requirepass")
def _requirepass(make):
    assert make().connect().call("PING") == b"+PONG\r\n"
    c = make(requirepass="s3cret").connect()
    assert c.call("PING") == NOAUTH
    assert c.call("AUTH", "s3cret") == b"+OK\r\n" and c.call("PING") == b"+PONG\r\n"


def stranger(node) -> Conn:
    """A client from beyond loopback (10.9.8.7)."""
    from twisted.internet.address import IPv4Address

    return node.connect(StringTransport(peerAddress=IPv4Address("TCP", "10.9.8.7", 40000)))


@effect("protected-mode")
def _protected_mode(make):
    """On by default: while the default user has no password, a client
    beyond loopback is told why and closed (tests/protocol/test_access.py has the
    rest)."""
    from disque.access.protection import DENIED

    refused = stranger(make())
    assert refused.take() == DENIED and refused.closed
    assert make().connect().call("PING") == b"+PONG\r\n"
    assert stranger(make(**{"protected-mode": "no"})).call("PING") == b"+PONG\r\n"
    assert stranger(make(requirepass="pw")).call("PING") == NOAUTH


@effect("enable-debug-command")
def _enable_debug_command(make):
    """``local`` by default: DEBUG from loopback only; ``no``: nobody;
    ``yes``: everyone."""
    from disque.access.protection import DEBUG_NOT_ALLOWED

    open_to_all = {"protected-mode": "no"}
    local = make(**open_to_all)
    assert local.connect().call("DEBUG", "JOBS") == b":0\r\n"
    assert stranger(local).call("DEBUG", "JOBS") == DEBUG_NOT_ALLOWED
    assert make(**{"enable-debug-command": "no"}).connect().call("DEBUG", "JOBS") == DEBUG_NOT_ALLOWED
    assert stranger(make(**open_to_all, **{"enable-debug-command": "yes"})).call("DEBUG", "JOBS") == b":0\r\n"


def test_wrong_auth_passwords_are_counted_and_logged_once_a_minute(make):
    node = make(requirepass="s3cret")
    c, admin = node.connect(), node.connect()
    admin.call("AUTH", "s3cret")
    with captured_log() as events:
        for _ in range(3):  # (more in a row are answered late: test_access.py)
            assert c.call("AUTH", "guess") == b"-ERR invalid password\r\n"
    assert b"auth_failures:3\r\n" in admin.call("INFO", "STATS")
    lines = [t for t in texts(events) if "authentication" in t]
    assert lines == ["Failed client authentication from 127.0.0.1: invalid password"]
    node.reactor.advance(61)
    with captured_log() as events:
        c.call("AUTH", "guess")
    assert [t for t in texts(events) if "authentication" in t] == [
        "Failed client authentication from 127.0.0.1: invalid password "
        "(2 more failures not logged in the last minute)"]
    assert c.call("AUTH", "s3cret") == b"+OK\r\n"
    assert b"auth_failures:4\r\n" in c.call("INFO", "STATS")
    assert b"bus_auth_failures:0\r\n" in c.call("INFO", "STATS")


def test_before_auth_requests_are_limited_as_in_redis(make):
    """Redis 6.2.6+: a client that has not authenticated may not send more
    than 10 arguments or a bulk over 16384 bytes; an AUTH earlier in the
    same pipeline lifts the limits for what follows it."""
    big = cmd("ADDJOB", "q", "x" * 20000, "0")
    node = make(requirepass="s3cret")
    c = node.connect()
    c.proto.dataReceived(b"*11\r\n")
    assert c.take() == b"-ERR Protocol error: unauthenticated multibulk length\r\n" and c.closed
    c = node.connect()
    c.proto.dataReceived(cmd("PING") + big)
    assert c.take() == NOAUTH + b"-ERR Protocol error: unauthenticated bulk length\r\n" and c.closed
    c = node.connect()
    c.proto.dataReceived(cmd("AUTH", "guess") + big)
    assert c.take() == b"-ERR invalid password\r\n-ERR Protocol error: unauthenticated bulk length\r\n"
    c = node.connect()
    c.proto.dataReceived(cmd("AUTH", "s3cret") + big + cmd("QLEN", "q"))
    reply = c.take()
    assert reply.startswith(b"+OK\r\n+D-") and reply.endswith(b":1\r\n") and not c.closed
    assert make().connect().call("ADDJOB", "q", "x" * 20000, "0").startswith(b"+D-")  # no requirepass
    c = node.connect()  # the password removed at run time: nobody is held to them
    assert c.call("CONFIG", "SET", "requirepass", "") == NOAUTH
    admin = node.connect()
    admin.call("AUTH", "s3cret")
    admin.call("CONFIG", "SET", "requirepass", "")
    assert c.call("ADDJOB", "q", "x" * 20000, "0").startswith(b"+D-")


@effect("cluster-password")
def _cluster_password(make):
    """The bus handshake (tests/protocol/test_bus_password.py shows it on the wire)."""
    assert make().runtime.bus.bus_handshake(initiator=True) is None
    node = make(**{"cluster-password": "s3cret"})
    assert node.runtime.bus.bus_handshake(initiator=True).hello().startswith(b"DA")
    node.connect().call("CONFIG", "SET", "cluster-password", "")
    assert node.runtime.bus.bus_handshake(initiator=False) is None


OPEN_BUS = ("cluster-password: the cluster bus listens beyond loopback (10.0.0.1) with neither cluster-password "
            "nor tls-cluster yes: anyone who can reach it could join the cluster; set one of them, or "
            "cluster-trusted-network yes if every host that can reach the bus may join")


@effect("cluster-trusted-network")
def _cluster_trusted_network(make):
    """A bus beyond loopback without cluster-password or tls-cluster stops
    start-up in one line, unless the network is trusted (docs/security.md;
    the same on real processes: tests/process/test_e2e_bus_closed.py)."""
    beyond = {"cluster-listen": "tcp:17711:interface=10.0.0.1"}
    with pytest.raises(ConfigError) as e:
        make(**beyond)
    assert str(e.value) == OPEN_BUS
    node = make(**beyond, **{"cluster-trusted-network": "yes"})
    assert node.connect().call("CONFIG", "GET", "cluster-trusted-network") == cmd("cluster-trusted-network", "yes")
    assert node.runtime.bus.bus_handshake(initiator=False) is None  # open, as asked


@effect("cluster-seeds")
def _cluster_seeds(make):
    """The node dials its seeds' buses (client port + 10000) by itself, but
    not its own address; CONFIG GET shows the list, CONFIG SET replaces it
    and tries the new one at once (tests/sim/test_seeds.py has the loop,
    tests/process/test_e2e_seeds.py real clusters)."""
    def dialled(node):
        return [(host, port) for host, port, *_ in node.reactor.tcpClients]

    assert dialled(make()) == []
    node = make(**{"cluster-seeds": "127.0.0.1:7711 127.0.0.1:7712 localhost:7711"})  # (it is 127.0.0.1:7711)
    assert dialled(node) == [("127.0.0.1", 17712)]
    c = node.connect()
    assert c.call("CONFIG", "GET", "cluster-seeds") == cmd("cluster-seeds", "127.0.0.1:7711 127.0.0.1:7712 "
                                                                             "localhost:7711")
    assert c.call("CONFIG", "SET", "cluster-seeds", "[::1]:7713") == b"+OK\r\n"
    node.advance(0.2)
    assert dialled(node)[1:] == [("::1", 17713)]
    assert c.call("CONFIG", "SET", "cluster-seeds", "127.0.0.1") == \
        b"-ERR Invalid argument '127.0.0.1' for CONFIG SET 'cluster-seeds'\r\n"
    assert c.call("CONFIG", "GET", "cluster-seeds") == cmd("cluster-seeds", "[::1]:7713")
    assert c.call("CONFIG", "SET", "cluster-seeds", "") == b"+OK\r\n"  # none: nothing is tried
    node.advance(60)
    assert len(dialled(node)) == 2 and c.call("CONFIG", "GET", "cluster-seeds") == cmd("cluster-seeds", "")


@pytest.mark.parametrize("value, why", [
    ("127.0.0.1", "'127.0.0.1' is not host:port (a client port, as CLUSTER MEET takes; IPv6 in brackets: "
                  "[::1]:7711)"),
    ("::1:7711", "'::1:7711' is not host:port"),
    ("127.0.0.1:60000", "'127.0.0.1:60000': the port must be 1..55535 (its bus port, + 10000, must exist)"),
    ("bad_host:7711", "'bad_host:7711' is not host:port"),
])
def test_a_malformed_seed_stops_start_up_in_one_line(make, value, why):
    with pytest.raises(ConfigError) as e:
        make(**{"cluster-seeds": "127.0.0.1:7712 " + value})
    assert str(e.value).startswith("command-line option 'cluster-seeds': invalid value '127.0.0.1:7712 %s' for "
                                   "'cluster-seeds': %s" % (value, why))
    assert "\n" not in str(e.value)


def test_config_set_cannot_open_a_bus_beyond_loopback(make):
    """CONFIG SET cluster-password "" would undo the start-up check: refused
    on a bus beyond loopback (the password stays), allowed on loopback or
    a trusted network."""
    node = make(bind="0.0.0.0", **{"cluster-password": "s3cret"})
    c = node.connect()
    assert c.call("CONFIG", "SET", "cluster-password", "") == b"-ERR " + OPEN_BUS.split(": ", 1)[1].replace(
        "10.0.0.1", "every interface").encode() + b"\r\n"
    assert c.call("CONFIG", "GET", "cluster-password") == cmd("cluster-password", "s3cret")
    assert c.call("CONFIG", "SET", "cluster-password", "other") == b"+OK\r\n"
    for directives in ({}, {"bind": "0.0.0.0", "cluster-trusted-network": "yes"}):
        c = make(**{"cluster-password": "s3cret"}, **directives).connect()
        assert c.call("CONFIG", "SET", "cluster-password", "") == b"+OK\r\n"


@effect("maxclients")
def _maxclients(make):
    node = make(maxclients="1")
    node.connect()
    second = node.connect()
    assert second.take() == b"-ERR max number of clients reached\r\n" and second.closed
    node = make()
    node.connect()
    assert node.connect().call("PING") == b"+PONG\r\n"


@effect("timeout")
def _timeout(make):
    for value, closed in (("0", False), ("2", True)):
        node = make(timeout=value)
        idle, busy, parked = node.connect(), node.connect(), node.connect()
        parked.proto.dataReceived(cmd("GETJOB", "FROM", "nothing"))  # waits: never idle
        for _ in range(8):  # 4 s: idle for more than 2 s at a once-a-second check
            node.advance(0.5)
            busy.call("PING")
        assert idle.closed is closed
        assert not busy.closed and not parked.closed


@effect("tcp-keepalive")
def _tcp_keepalive(make):
    class SocketTransport(StringTransport):
        """A string transport over a real (unconnected) socket, which is
        where the keepalive options go."""

        def __init__(self):
            super().__init__(peerAddress=LOCAL_PEER)
            self.sock = socket.socket()

        def setTcpNoDelay(self, enabled):
            pass

        def setTcpKeepAlive(self, enabled):
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, enabled)

        def getHandle(self):
            return self.sock

    for value, expected in (("0", 0), ("60", 1)):
        tr = SocketTransport()
        make(**{"tcp-keepalive": value}).connect(tr)
        assert bool(tr.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)) == bool(expected)
        if expected and hasattr(socket, "TCP_KEEPIDLE"):
            assert tr.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 60
            assert tr.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 20
        tr.sock.close()


@effect("client-output-buffer-limit")
def _client_output_buffer_limit(make):
    for value, closed in (("normal 0 0 0", False), ("normal 200 0 0", True)):
        node = make(**{"client-output-buffer-limit": value})
        monitor, other = node.connect(), node.connect()
        monitor.call("MONITOR")
        monitor.proto.pauseProducing()  # its transport is full: it does not read
        for _ in range(10):
            other.call("PING")  # a MONITOR line each
            if not monitor.closed:
                monitor.proto.pauseProducing()  # as Twisted, at each write while full
        assert monitor.closed is closed
        assert monitor.tr.disconnected is closed  # aborted, not flushed: it would never drain


@effect("client-query-buffer-limit")
def _client_query_buffer_limit(make):
    """A request of two 600 KB arguments, the second still coming: 1.1 MB
    held, though no argument is near the bulk limit and each one leaves
    the unparsed buffer once read."""
    request = b"*3\r\n$4\r\nPING\r\n$600000\r\n" + b"a" * 600000 + b"\r\n$600000\r\n" + b"b" * 500000
    for value, closed in (("1gb", False), ("1mb", True)):
        node = make(**{"client-query-buffer-limit": value})
        c = node.connect()
        with captured_log() as events:
            for i in range(0, len(request), 65536):
                c.proto.dataReceived(request[i:i + 65536])
        assert c.closed is closed and c.tr.disconnected is closed and c.take() == b""
        assert any("Closing client that reached max query buffer length" in t for t in texts(events)) is closed


@effect("maxmemory-clients")
def _maxmemory_clients(make):
    """What all clients hold together (here one request of 300 KB, more to
    come): past the limit the biggest client is closed.  A share of
    maxmemory follows maxmemory; CONFIG SET applies at once."""
    request = b"*2\r\n$4\r\nPING\r\n$400000\r\n" + b"x" * 300000
    for directives, closed in (({}, False), ({"maxmemory-clients": "256kb"}, True),
                               ({"maxmemory-clients": "512kb"}, False),
                               ({"maxmemory": "2mb", "maxmemory-clients": "10%"}, True),
                               ({"maxmemory": "4mb", "maxmemory-clients": "10%"}, False)):
        node = make(**directives)
        holder, other = node.connect(), node.connect()
        with captured_log() as events:
            holder.proto.dataReceived(request)
        assert holder.closed is closed and holder.tr.disconnected is closed and not other.closed
        assert any("Evicting client" in t for t in texts(events)) is closed
    node = make()
    holder, admin = node.connect(), node.connect()
    holder.proto.dataReceived(request)
    assert admin.call("CONFIG", "SET", "maxmemory-clients", "10%") == b"+OK\r\n"  # of 1 GB
    assert admin.call("CONFIG", "GET", "maxmemory-clients") == b"*2\r\n$17\r\nmaxmemory-clients\r\n$3\r\n10%\r\n"
    assert not holder.closed
    assert admin.call("CONFIG", "SET", "maxmemory", "2mb") == b"+OK\r\n"  # 10% is now 205 KB
    assert holder.closed and b"evicted_clients:1\r\n" in admin.call("INFO", "STATS")
    assert admin.call("CONFIG", "SET", "maxmemory-clients", "101%").startswith(b"-ERR Invalid argument")


@effect("proto-max-bulk-len")
def _proto_max_bulk_len(make):
    header = b"*2\r\n$4\r\nPING\r\n$2000000\r\n"
    c = make().connect()
    c.proto.dataReceived(header)
    assert c.take() == b"" and not c.closed  # waits for the 2 MB argument
    node = make(**{"proto-max-bulk-len": "1mb"})
    c = node.connect()
    c.proto.dataReceived(header)
    assert c.take() == b"-ERR Protocol error: invalid bulk length\r\n" and c.closed
    c = node.connect()
    node.connect().call("CONFIG", "SET", "proto-max-bulk-len", "2mb")  # connected clients follow at once
    c.proto.dataReceived(header + b"x" * 2000000 + b"\r\n")
    assert c.take() == b"$2000000\r\n" + b"x" * 2000000 + b"\r\n" and not c.closed  # PING echoes it


@effect("cluster-link-sendbuf-limit")
def _cluster_link_sendbuf_limit(make):
    from disque.bus.protocol import BusProtocol

    for value, dropped in (("0", False), ("1mb", True)):
        node = make(**{"cluster-link-sendbuf-limit": value})
        tr = StringTransport()
        link = BusProtocol(node.runtime.bus, b"b" * 40)
        link.makeConnection(tr)
        link.pauseProducing()  # its transport is full: the peer does not read
        with captured_log() as events:
            for _ in range(12):
                link.send_frame(b"f" * 100_000)
                link.flush()
        assert tr.disconnected is dropped and link.closed is dropped
        assert len(tr.value()) == (1_100_000 + 11 * 4 if dropped else 1_200_000 + 12 * 4)
        assert any("cluster-link-sendbuf-limit" in t for t in texts(events)) is dropped


@effect("rename-command")
def _rename_command(make):
    assert make().connect().call("CONFIG", "GET", "hz") == b"*2\r\n$2\r\nhz\r\n$2\r\n10\r\n"
    c = make(**{"rename-command": "CONFIG cfg"}).connect()
    assert c.call("CONFIG", "GET", "hz") == b"-ERR unknown command 'CONFIG'\r\n"
    assert c.call("cfg", "GET", "hz") == b"*2\r\n$2\r\nhz\r\n$2\r\n10\r\n"


@effect("slowlog-log-slower-than")
def _slowlog_threshold(make):
    for value, logged in (("10000", 0), ("0", 3)):
        c = make(**{"slowlog-log-slower-than": value}).connect()
        for _ in range(3):
            c.call("PING")
        assert c.call("SLOWLOG", "LEN") == b":%d\r\n" % logged


@effect("slowlog-max-len")
def _slowlog_max_len(make):
    for value, kept in (("128", 3), ("1", 1)):
        c = make(**{"slowlog-log-slower-than": "0", "slowlog-max-len": value}).connect()
        for _ in range(3):
            c.call("PING")
        assert c.call("SLOWLOG", "LEN") == b":%d\r\n" % kept


@effect("latency-monitor-threshold")
def _latency_monitor_threshold(make):
    c = make().connect()
    c.call("DEBUG", "SLEEP", "0.005")
    assert c.call("LATENCY", "LATEST") == b"*0\r\n"
    c = make(**{"latency-monitor-threshold": "1"}).connect()
    c.call("DEBUG", "SLEEP", "0.005")
    assert c.call("LATENCY", "LATEST").startswith(b"*1\r\n*4\r\n$7\r\ncommand\r\n")


# -- memory ----------------------------------------------------------------------

@effect("maxmemory")
def _maxmemory(make):
    c = make().connect()
    assert c.call("ADDJOB", "q", "x", "0").startswith(b"+D-")
    assert c.call("ADDJOB", "q", "x", "0").startswith(b"+D-")
    c = make(maxmemory="1").connect()
    assert c.call("ADDJOB", "q", "x", "0").startswith(b"+D-")  # then the node is full
    assert c.call("ADDJOB", "q", "x", "0").startswith(b"-OOM ")


@effect("maxmemory-policy")
def _maxmemory_policy(make):
    for policy, left in (("acks", 0), ("noeviction", 1)):
        node = make(**{"maxmemory-policy": policy})
        c = node.connect()
        c.call("ADDJOB", "q", "x", "0", "RETRY", "0")
        c.call("GETJOB", "FROM", "q")  # delivered, never to be again: evictable
        c.call("CONFIG", "SET", "maxmemory", "1")
        node.advance(0.2)
        assert len(node.runtime.node.jobs) == left


# -- timers and the cluster ------------------------------------------------------

@effect("hz")
def _hz(make):
    node = make()
    assert 9 <= ticks_in_one_second(node.service, node.reactor) <= 11
    node = make(hz="50")
    assert 48 <= ticks_in_one_second(node.service, node.reactor) <= 52
    node.connect().call("CONFIG", "SET", "hz", "20")
    assert 19 <= ticks_in_one_second(node.service, node.reactor) <= 21


@effect("cluster-node-timeout")
def _cluster_node_timeout(make):
    assert make().runtime.node.cluster.node_timeout == 15000
    node = make(**{"cluster-node-timeout": "500"})
    assert node.runtime.node.cluster.node_timeout == 500
    node.connect().call("CONFIG", "SET", "cluster-node-timeout", "700")
    assert node.runtime.node.cluster.node_timeout == 700


@effect("dedup-window")
def _dedup_window(make):
    assert make().runtime.node.jobs.dedup.window == 600_000
    node = make(**{"dedup-window": "5"})
    assert node.runtime.node.jobs.dedup.window == 5_000
    node.connect().call("CONFIG", "SET", "dedup-window", "7")
    assert node.runtime.node.jobs.dedup.window == 7_000


@effect("max-deliveries")
def _max_deliveries(make):
    """The limit of jobs added without MAXDELIVERIES: a job NACKed past it
    goes to <queue>:dead; 0 (the default) adds no options at all."""
    node = make()
    c = node.connect()
    job_id = c.call("ADDJOB", "q", "x", "0")[1:-2]
    assert b"max-deliveries" not in c.call("SHOW", job_id)
    node = make(**{"max-deliveries": "1"})
    c = node.connect()
    job_id = c.call("ADDJOB", "q", "x", "0")[1:-2]
    assert c.call("GETJOB", "FROM", "q").count(job_id) == 1
    assert c.call("NACK", job_id) == b":1\r\n"
    assert c.call("QLEN", "q") == b":0\r\n" and c.call("QLEN", "q:dead") == b":1\r\n"
    c.call("CONFIG", "SET", "max-deliveries", "0")
    job_id = c.call("ADDJOB", "q", "x", "0")[1:-2]
    assert b"max-deliveries" not in c.call("SHOW", job_id)


@effect("output-flush")
def _output_flush(make):
    """read: a reply leaves with its read; turn (the default; nodes in
    memory run read): replies wait for the end of the reactor turn (on a
    reactor without before_sleep, a delayed call of 0 s, here when the
    test's clock advances), then every connection's leave together."""
    assert Config.defaults()["output-flush"] == "turn"
    node = make()
    a, b = node.connect(), node.connect()
    assert a.call("PING") == b"+PONG\r\n"
    assert a.call("CONFIG", "SET", "output-flush", "turn") == b""  # in effect at once: its own reply waits
    assert a.call("PING") == b""
    b.proto.dataReceived(cmd("ADDJOB", "q", "x", "0"))
    assert b.take() == b""
    node.reactor.advance(0)
    assert a.take() == b"+OK\r\n+PONG\r\n" and b.take().startswith(b"+D-")
    node = make(**{"output-flush": "turn"})
    c = node.connect()
    assert c.call("PING") == b""
    node.service.stopService()  # what the turn kept leaves before the connections close
    assert c.take() == b"+PONG\r\n"
    assert not [call for call in node.reactor.getDelayedCalls() if call.active()]  # no end of turn left


@effect("watchdog-period")
def _watchdog_period(make):
    for value, fired in (("0", False), ("20", True)):
        node = make(**{"watchdog-period": value, "hz": "100"})
        with captured_log() as events:
            time.sleep(0.15)  # the reactor does not turn: a stall
        # the banner, then the stack of what held the loop: this very function
        assert any(BANNER in t and "in _watchdog_period" in t for t in texts(events)) is fired
        node.service.stopService()


if hasattr(gc, "freeze"):  # on PyPy the directive is fixed at 0 (test_fixed_directive_refuses_other_values)
    @effect("gc-freeze-interval")
    def _gc_freeze_interval(make):
        _freezes(make)


def _freezes(make):
    gc.unfreeze()
    try:
        make(**{"gc-freeze-interval": "0"})
        assert gc.get_freeze_count() == 0
        make()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@effect("federation-policy")
def _federation_policy(make):
    from disque.federation.default import DefaultPolicy

    assert isinstance(make().runtime.node.federation.policy, DefaultPolicy)
    with pytest.raises(StrategyError):
        make(**{"federation-policy": "nosuch"})


# -- the HTTP side (disque/http/) -------------------------------------------------

def http_get(node, path, headers=b"", host=b"localhost"):
    """(status line, headers and body) of GET ``path`` on the node's HTTP
    listener, in memory, from loopback."""
    from twisted.internet.address import IPv4Address

    [site] = [f for port, f, *_ in node.reactor.tcpServers if port == node.config["http-port"]]
    proto = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    tr = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40000))
    proto.makeConnection(tr)
    proto.dataReceived(b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n" + headers
                       + b"\r\n")
    head, _, body = tr.value().partition(b"\r\n\r\n")
    return head, body


@effect("http-port", "http-bind", "http-frontend")
def _http(make):
    from disque.http.access import AccessSite

    assert [p[0] for p in make().reactor.tcpServers] == [7711, 17711]  # off by default
    node = make(**{"http-port": "8080", "http-bind": "10.1.2.3"})
    [(port, site, _, interface)] = [p for p in node.reactor.tcpServers if p[0] == 8080]
    assert isinstance(site, AccessSite) and interface == "10.1.2.3"
    head, body = http_get(node, b"/metrics")
    assert head.startswith(b"HTTP/1.1 200") and b"text/plain; version=0.0.4" in head
    assert b"disque_jobs 0\n" in body
    with pytest.raises(StrategyError, match="http-frontend 'nosuch'"):
        make(**{"http-port": "8081", "http-frontend": "nosuch"})
    make(**{"http-frontend": "nosuch"})  # not made while the HTTP side is off


def test_http_side_needs_requirepass_when_set(make):
    import base64

    node = make(**{"http-port": "8080", "requirepass": "s3cret"})
    assert http_get(node, b"/metrics")[0].startswith(b"HTTP/1.1 401")
    assert b'www-authenticate: basic realm="disque"' in http_get(node, b"/metrics")[0].lower()
    assert http_get(node, b"/metrics", b"Authorization: Bearer s3cret\r\n")[0].startswith(b"HTTP/1.1 200")
    basic = b"Authorization: Basic " + base64.b64encode(b"prometheus:s3cret") + b"\r\n"
    assert http_get(node, b"/metrics", basic)[0].startswith(b"HTTP/1.1 200")
    wrong = b"Authorization: Basic " + base64.b64encode(b"prometheus:guess") + b"\r\n"
    assert http_get(node, b"/metrics", wrong)[0].startswith(b"HTTP/1.1 401")
    admin = node.connect()
    admin.call("AUTH", "s3cret")
    assert b"auth_failures:1\r\n" in admin.call("INFO", "STATS")  # counted like a wrong AUTH
    admin.call("CONFIG", "SET", "requirepass", "")
    assert http_get(node, b"/metrics")[0].startswith(b"HTTP/1.1 200")  # at once


@effect("http-allowed-hosts")
def _http_allowed_hosts(make):
    """A Host header naming something else than localhost, an IP address
    or these names is refused (421, DNS rebinding); "*" allows any
    (tests/protocol/test_http_access.py has the rest)."""
    node = make(**{"http-port": "8080"})
    node.connect().call("ADDJOB", "q", "the-body", "0")
    foreign = http_get(node, b"/api/queues/q", host=b"dash.example")
    assert foreign[0].startswith(b"HTTP/1.1 421") and b"the-body" not in foreign[1]
    node = make(**{"http-port": "8080", "http-allowed-hosts": "dash.example"})
    node.connect().call("ADDJOB", "q", "the-body", "0")
    assert b"the-body" in http_get(node, b"/api/queues/q", host=b"dash.example")[1]
    assert http_get(node, b"/api/queues/q", host=b"evil.example")[0].startswith(b"HTTP/1.1 421")
    with pytest.raises(ConfigError, match="'dash.example:80' is not a host name"):
        make(**{"http-allowed-hosts": "dash.example:80"})


@effect("metrics-max-queues")
def _metrics_max_queues(make):
    node = make(**{"http-port": "8080", "metrics-max-queues": "2"})
    c = node.connect()
    for name, n in (("big", 3), ("mid", 2), ("small", 1), ("tiny", 1)):
        for _ in range(n):
            c.call("ADDJOB", name, "x", "0")
    body = http_get(node, b"/metrics")[1]
    lines = [l for l in body.split(b"\n") if l.startswith(b"disque_queue_jobs{")]
    assert lines == [b'disque_queue_jobs{queue="big"} 3', b'disque_queue_jobs{queue="mid"} 2',
                     b'disque_queue_jobs{queue="_other"} 2']
    c.call("CONFIG", "SET", "metrics-max-queues", "0")
    lines = [l for l in http_get(node, b"/metrics")[1].split(b"\n") if l.startswith(b"disque_queue_jobs{")]
    assert lines == [b'disque_queue_jobs{queue="_other"} 7']


# -- listening -------------------------------------------------------------------

@effect("port", "bind", "tcp-backlog")
def _listeners(make):
    node = make()
    assert sorted((p[0], p[2], p[3]) for p in node.reactor.tcpServers) == [
        (7711, 511, "127.0.0.1"), (17711, 511, "127.0.0.1")]
    node = make(port="7800", bind="127.0.0.2", **{"tcp-backlog": "64"})
    assert sorted((p[0], p[2], p[3]) for p in node.reactor.tcpServers) == [
        (7800, 64, "127.0.0.2"), (17800, 64, "127.0.0.2")]


@effect("listen", "cluster-listen")
def _endpoint_listeners(make):
    node = make(listen="tcp:7900:interface=127.0.0.3", **{"cluster-listen": "tcp:17950:interface=127.0.0.4"})
    assert sorted((p[0], p[3]) for p in node.reactor.tcpServers) == [(7900, "127.0.0.3"), (17950, "127.0.0.4")]


@effect("cluster-connect")
def _cluster_connect(make):
    def link_timeout(**directives):
        node = make(**directives)
        node.connect().call("CLUSTER", "MEET", "127.0.0.9", "7712")
        node.advance(0.2)
        return [c[3] for c in node.reactor.tcpClients if c[:2] == ("127.0.0.9", 17712)]

    assert link_timeout() == [5]
    assert link_timeout(**{"cluster-connect": "tcp:timeout=9"}) == [9]


# -- TLS (disque/node/tls.py; handshakes in memory, tls_support.handshake) -------------

def _tls(make, tmp_path, **directives):
    """A node with a TLS port and the node certificate of a throwaway CA;
    (node, pki)."""
    from tests.support.tls import make_pki, node_directives

    pki = make_pki(tmp_path / "pki")
    return make(**node_directives(pki, **{"tls-port": "7712", **directives})), pki


def _clients_context(node):
    return node.service.tls.current["clients"]


@effect("tls-port")
def _tls_port(make, tmp_path):
    from twisted.protocols.tls import TLSMemoryBIOFactory

    assert [p[0] for p in make().reactor.tcpServers] == [7711, 17711]
    node, _ = _tls(make, tmp_path)
    tls = [p[0] for p in node.reactor.tcpServers if isinstance(p[1], TLSMemoryBIOFactory)]
    assert [p[0] for p in node.reactor.tcpServers] == [7711, 7712, 17711] and tls == [7712]


@effect("tls-cert-file")
def _tls_cert_file(make, tmp_path):
    from cryptography import x509

    node, pki = _tls(make, tmp_path)
    with open(pki.node, "rb") as f:
        expected = x509.load_pem_x509_certificate(f.read())
    presented = _ssl_connection(_clients_context(node)).get_certificate().to_cryptography()
    assert presented == expected
    with pytest.raises(Exception, match="tls-cert-file: .* is not a PEM certificate"):
        _tls(make, tmp_path, **{"tls-cert-file": pki.ca_key})


def _ssl_connection(ctx):
    from OpenSSL import SSL

    return SSL.Connection(ctx, None)


@effect("http-tls")
def _http_tls(make, tmp_path):
    from twisted.protocols.tls import TLSMemoryBIOFactory

    from disque.node.tls import TLSError
    from tests.support.tls import handshake, make_pki

    pki = make_pki(tmp_path / "pki")
    node = make(**{"http-port": "8080", "http-tls": "yes", "tls-cert-file": pki.node, "tls-key-file": pki.node_key})
    [site] = [p[1] for p in node.reactor.tcpServers if p[0] == 8080]
    assert isinstance(site, TLSMemoryBIOFactory) and [p[0] for p in node.reactor.tcpServers] == [7711, 17711, 8080]
    assert handshake(node.service.tls.current["http"], ca=pki.ca) is None  # no client certificate needed
    assert "clients" not in node.service.tls.current  # no TLS client port for all that
    plain = make(**{"http-port": "8080"})
    assert not isinstance([p[1] for p in plain.reactor.tcpServers if p[0] == 8080][0], TLSMemoryBIOFactory)
    with pytest.raises(TLSError, match="http-tls: the HTTP side is off: set http-port"):
        make(**{"http-tls": "yes", "tls-cert-file": pki.node, "tls-key-file": pki.node_key})
    with pytest.raises(TLSError, match="tls-cert-file: TLS needs a certificate"):
        make(**{"http-port": "8080", "http-tls": "yes"})


@effect("tls-key-file")
def _tls_key_file(make, tmp_path):
    from tests.support.tls import handshake

    node, pki = _tls(make, tmp_path)
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca) is None
    with pytest.raises(Exception, match="tls-key-file: .* is not the key of the certificate"):
        _tls(make, tmp_path, **{"tls-key-file": pki.node2_key})


@effect("tls-ca-cert-file")
def _tls_ca_cert_file(make, tmp_path):
    from tests.support.tls import handshake

    node, pki = _tls(make, tmp_path)
    assert handshake(_clients_context(node), pki.intruder, pki.intruder_key, pki.ca)[0] == "server"
    node = make(**{"tls-port": "7712", "tls-cert-file": pki.node, "tls-key-file": pki.node_key,
                   "tls-ca-cert-file": pki.other_ca})  # trusts the other CA instead
    assert handshake(_clients_context(node), pki.intruder, pki.intruder_key, pki.ca) is None
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca)[0] == "server"


@effect("tls-ca-cert-dir")
def _tls_ca_cert_dir(make, tmp_path):
    import shutil

    from OpenSSL import crypto
    from tests.support.tls import handshake

    node, pki = _tls(make, tmp_path)
    hashed = tmp_path / "cas"
    hashed.mkdir()
    with open(pki.other_ca, "rb") as f:  # as openssl rehash names it
        name = "%08x.0" % crypto.load_certificate(crypto.FILETYPE_PEM, f.read()).subject_name_hash()
    shutil.copy(pki.other_ca, str(hashed / name))
    node = make(**{"tls-port": "7712", "tls-cert-file": pki.node, "tls-key-file": pki.node_key,
                   "tls-ca-cert-dir": str(hashed)})
    assert handshake(_clients_context(node), pki.intruder, pki.intruder_key, pki.ca) is None
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca)[0] == "server"


@effect("tls-auth-clients")
def _tls_auth_clients(make, tmp_path):
    from tests.support.tls import handshake

    node, pki = _tls(make, tmp_path)
    assert handshake(_clients_context(node), ca=pki.ca)[0] == "server"  # yes: a certificate is required
    node, pki = _tls(make, tmp_path, **{"tls-auth-clients": "optional"})
    assert handshake(_clients_context(node), ca=pki.ca) is None
    assert handshake(_clients_context(node), pki.intruder, pki.intruder_key, pki.ca)[0] == "server"
    node, pki = _tls(make, tmp_path, **{"tls-auth-clients": "no"})
    assert handshake(_clients_context(node), pki.intruder, pki.intruder_key, pki.ca) is None  # not even asked


@effect("tls-cluster")
def _tls_cluster(make, tmp_path):
    from twisted.protocols.tls import TLSMemoryBIOFactory

    def bus(node):
        return [(p[0], isinstance(p[1], TLSMemoryBIOFactory)) for p in node.reactor.tcpServers if p[0] > 10000]

    node, _ = _tls(make, tmp_path)
    assert bus(node) == [(17711, False)] and node.service.node.cluster.myself.port == 7711
    node, _ = _tls(make, tmp_path, **{"tls-cluster": "yes"})
    assert bus(node) == [(17712, True)] and node.service.node.cluster.myself.port == 7712


@effect("tls-protocols")
def _tls_protocols(make, tmp_path):
    from OpenSSL import SSL
    from tests.support.tls import handshake

    node, pki = _tls(make, tmp_path)
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_2_VERSION) is None
    node, pki = _tls(make, tmp_path, **{"tls-protocols": "TLSv1.3"})
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_2_VERSION) is not None
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_3_VERSION) is None


@effect("tls-ciphers")
def _tls_ciphers(make, tmp_path):
    from OpenSSL import SSL
    from tests.support.tls import handshake

    chacha = "ECDHE-ECDSA-CHACHA20-POLY1305"
    node, pki = _tls(make, tmp_path)
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_2_VERSION, chacha) is None
    node, pki = _tls(make, tmp_path, **{"tls-ciphers": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_2_VERSION, chacha)
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_2_VERSION,
                     "ECDHE-ECDSA-AES128-GCM-SHA256") is None


@effect("tls-ciphersuites")
def _tls_ciphersuites(make, tmp_path):
    from OpenSSL import SSL
    from tests.support.tls import handshake

    if not hasattr(SSL.Context, "set_tls13_ciphersuites"):  # an older pyOpenSSL: refused, never ignored
        with pytest.raises(Exception, match="tls-ciphersuites: this pyOpenSSL cannot"):
            _tls(make, tmp_path, **{"tls-ciphersuites": "TLS_AES_128_GCM_SHA256"})
        return
    chacha = "TLS_CHACHA20_POLY1305_SHA256"
    node, pki = _tls(make, tmp_path)
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_3_VERSION,
                     ciphersuites=chacha) is None
    node, pki = _tls(make, tmp_path, **{"tls-ciphersuites": "TLS_AES_128_GCM_SHA256"})
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_3_VERSION,
                     ciphersuites=chacha)
    assert handshake(_clients_context(node), pki.client, pki.client_key, pki.ca, SSL.TLS1_3_VERSION,
                     ciphersuites="TLS_AES_128_GCM_SHA256") is None


# -- files -----------------------------------------------------------------------

@effect("dir", "cluster-config-file")
def _node_file(make):
    node = make()
    assert os.path.exists(os.path.join(node.dir, "nodes.conf"))
    node = make(**{"cluster-config-file": "me.conf"})
    assert os.path.exists(os.path.join(node.dir, "me.conf"))
    assert not os.path.exists(os.path.join(node.dir, "nodes.conf"))


@effect("persistence")
def _persistence(make):
    assert isinstance(make().service.persistence, AOFPersistence)
    assert isinstance(make(persistence="none").service.persistence, NoPersistence)


@effect("appendonly", "appendfilename")
def _appendonly(make):
    node = make()
    node.connect().call("ADDJOB", "q", "x", "0")
    assert not os.path.exists(os.path.join(node.dir, "disque.aof"))
    node = make(appendonly="yes", appendfilename="jobs.aof", appendfsync="no")
    job_id = node.connect().call("ADDJOB", "q", "x", "0")[1:-2]
    with open(os.path.join(node.dir, "jobs.aof"), "rb") as f:
        assert job_id in f.read()


@contextmanager
def counted_fsyncs(monkeypatch):
    calls = []
    real = os.fsync

    def counting(fd):
        calls.append(fd)
        return real(fd)

    monkeypatch.setattr(files.os, "fsync", counting)
    yield calls


@effect("appendfsync")
def _appendfsync(make, monkeypatch):
    for policy, synced in (("no", False), ("always", True)):
        node = make(appendonly="yes", appendfsync=policy)
        c = node.connect()
        with counted_fsyncs(monkeypatch) as calls:
            c.call("ADDJOB", "q", "x", "0")
        assert (node.service.persistence.fd in calls) is synced


@effect("no-appendfsync-on-rewrite")
def _no_appendfsync_on_rewrite(make, monkeypatch):
    for value, synced in (("no", True), ("yes", False)):
        # rewrite-step=1: a rewrite takes several reactor turns
        node = make(appendonly="yes", appendfsync="always", persistence="aof:rewrite-step=1",
                    **{"no-appendfsync-on-rewrite": value})
        c = node.connect()
        for _ in range(3):
            c.call("ADDJOB", "q", "x", "0")
        c.call("BGREWRITEAOF")
        assert node.service.persistence.rewriting is not None
        with counted_fsyncs(monkeypatch) as calls:
            c.call("ADDJOB", "q", "during", "0")
        assert (node.service.persistence.fd in calls) is synced


@effect("aof-rewrite-incremental-fsync")
def _aof_rewrite_incremental_fsync(make, monkeypatch):
    monkeypatch.setattr(rewrite, "REWRITE_FSYNC_BYTES", 1)
    for value, expected in (("no", 2), ("yes", 5)):  # the final fsyncs (file, directory); one per step besides
        node = make(appendonly="yes", appendfsync="no", persistence="aof:rewrite-step=1",
                    **{"aof-rewrite-incremental-fsync": value})
        c = node.connect()
        for _ in range(3):
            c.call("ADDJOB", "q", "x", "0")
        with counted_fsyncs(monkeypatch) as calls:
            c.call("BGREWRITEAOF")
            node.advance(0.5)
        assert node.service.persistence.rewriting is None
        assert len(calls) == expected


@effect("auto-aof-rewrite-percentage", "auto-aof-rewrite-min-size")
def _auto_aof_rewrite(make):
    def rewrites(**directives):
        node = make(appendonly="yes", appendfsync="no", **directives)
        c = node.connect()
        for _ in range(3):
            c.call("ADDJOB", "q", "x", "0")
        with captured_log() as events:
            node.advance(0.2)
        return any("automatic AOF rewrite" in t for t in texts(events))

    assert not rewrites()  # 64mb by default: far away
    assert rewrites(**{"auto-aof-rewrite-min-size": "1"})
    assert not rewrites(**{"auto-aof-rewrite-min-size": "1", "auto-aof-rewrite-percentage": "0"})


def _write_aof(directory, tail=b""):
    os.makedirs(directory, exist_ok=True)
    node = NodeState(b"a" * 40, now=int(T0 * 1000))  # alive when the node starts
    job = node.addjob.add(b"q", b"body", 1, 0, 30, 3600, 0, False)
    job.state = QUEUED
    with open(os.path.join(directory, "disque.aof"), "wb") as f:
        f.write(records.record_bytes((b"LOADJOB", job)) + tail)


def test_debug_flushall_empties_the_append_only_file_too(make):
    node = make(appendonly="yes", appendfsync="always")
    c = node.connect()
    job_id = c.call("ADDJOB", "q", "body", "0")[1:-2]
    path = os.path.join(node.dir, "disque.aof")
    assert job_id in open(path, "rb").read()
    assert c.call("DEBUG", "FLUSHALL") == b"+OK\r\n"
    assert job_id not in open(path, "rb").read()  # a restart brings nothing back


@effect("aof-load-truncated")
def _aof_load_truncated(make, tmp_path):
    _write_aof(tmp_path / "n0", tail=b"*2\r\n$6\r\nDELJOB")
    assert len(make(appendonly="yes").runtime.node.jobs) == 1
    _write_aof(tmp_path / "n1", tail=b"*2\r\n$6\r\nDELJOB")
    with pytest.raises(AOFError, match="truncated"):
        make(appendonly="yes", **{"aof-load-truncated": "no"})


@effect("aof-load-damaged")
def _aof_load_damaged(make, tmp_path):
    def write_damaged(directory):
        os.makedirs(directory, exist_ok=True)
        node = NodeState(b"a" * 40, now=int(T0 * 1000))
        jobs = [node.addjob.add(b"q", b"body-%d" % i, 1, 0, 30, 3600, 0, False) for i in range(2)]
        data = bytearray(b"".join(records.record_bytes((b"LOADJOB", j)) for j in jobs))
        data[data.index(b"body-0")] ^= 0x01  # a flipped bit in the first job's body
        with open(os.path.join(directory, "disque.aof"), "wb") as f:
            f.write(data)
        return [j.id for j in jobs]

    damaged, intact = write_damaged(tmp_path / "n0")
    with pytest.raises(AOFError, match="checksum mismatch .*job %s" % re.escape(damaged.decode())):
        make(appendonly="yes")  # refuse, the default
    write_damaged(tmp_path / "n1")
    node = make(appendonly="yes", **{"aof-load-damaged": "skip"})
    assert damaged not in node.runtime.node.jobs and intact in node.runtime.node.jobs
    fields = dict(node.service.persistence.info())
    assert fields["aof_load_damaged_records"] == 1
    data = open(os.path.join(node.dir, "disque.aof"), "rb").read()
    assert damaged not in data and intact in data  # rewritten: the damage is gone


@effect("aof-enqueue-jobs-once")
def _aof_enqueue_jobs_once(make, tmp_path):
    _write_aof(tmp_path / "n0")
    assert make(appendonly="yes").connect().call("QLEN", "q") == b":0\r\n"
    _write_aof(tmp_path / "n1")
    node = make(appendonly="yes", **{"aof-enqueue-jobs-once": "yes"})
    assert node.connect().call("QLEN", "q") == b":1\r\n"
    assert node.config["aof-enqueue-jobs-once"] is False  # once


# -- the log ---------------------------------------------------------------------

READY = "ready to accept connections"


@effect("loglevel")
def _loglevel(make):
    for level, seen in (("notice", True), ("warning", False)):
        with captured_log() as events:
            node = make(loglevel=level)
        assert any(READY in t for t in texts(events)) is seen
        node.service.stopService()


@effect("logfile")
def _logfile(make, tmp_path):
    path = str(tmp_path / "node.log")
    with captured_log() as events:
        node = make(logfile=path)
    assert READY not in "".join(texts(events))
    with open(path) as f:
        assert READY in f.read()
    node.service.stopService()
    with captured_log() as events:
        make()
    assert any(READY in t for t in texts(events))


@effect("log-tag")
def _log_tag(make):
    for tag, start in (("", "Disque "), ("{port}/{id}", "[7711/%s] Disque "), ("eu-1", "[eu-1] Disque ")):
        with captured_log() as events:
            node = make(**{"log-tag": tag})
        [ready] = [t for t in texts(events) if READY in t]
        assert ready.startswith(start.replace("%s", node.runtime.node.my_id.decode()[:8])), ready
        node.service.stopService()


@effect("syslog-enabled", "syslog-ident", "syslog-facility")
def _syslog(make, monkeypatch):
    fake = FakeSyslog()
    monkeypatch.setitem(sys.modules, "syslog", fake)
    make().service.stopService()
    assert fake.opened is None and fake.lines == []
    make(**{"syslog-enabled": "yes", "syslog-ident": "dq", "syslog-facility": "local3"})
    assert fake.opened == ("dq", 9, 152)
    assert any(priority == 5 and READY in text for priority, text in fake.lines)


# -- users (disque/access/acl.py) ----------------------------------------------------------

def _loopback():
    from twisted.internet.address import IPv4Address

    return StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 40001))


@effect("user")
def _user(make):
    assert make().connect(_loopback()).call("AUTH", "alice", "pw").startswith(b"-WRONGPASS")
    c = make(user="alice on >pw ~a:* +@all").connect(_loopback())
    assert c.call("AUTH", "alice", "pw") == b"+OK\r\n"
    assert c.call("QLEN", "b") == b"-NOPERM No permissions to access a queue\r\n"


@effect("aclfile")
def _aclfile(make, tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user alice on >pw ~* +@all\n")
    c = make(aclfile=str(path)).connect(_loopback())
    assert c.call("AUTH", "alice", "pw") == b"+OK\r\n"
    assert c.call("ACL", "SAVE") == b"+OK\r\n" and "user alice on #" in path.read_text()


@effect("acllog-max-len")
def _acllog_max_len(make):
    for size, kept in (("128", 3), ("2", 2)):
        c = make(**{"acllog-max-len": size, "user": "u on >pw ~a:* +@all"}).connect(_loopback())
        for user in ("x", "y", "z"):
            c.call("AUTH", user, "wrong")
        assert c.call("ACL", "LOG").startswith(b"*%d\r\n" % kept)


@effect("tls-auth-clients-user")
def _tls_auth_clients_user(make, tmp_path):
    """The CN of the client's certificate (a real one, as pyOpenSSL gives
    it after the handshake) names the user; tests/process/test_e2e_acl.py makes
    the handshake with redis-cli."""
    from OpenSSL import crypto
    from tests.support.tls import make_pki

    pki = make_pki(tmp_path / "pki")
    with open(pki.tenant, "rb") as f:
        cert = crypto.load_certificate(crypto.FILETYPE_PEM, f.read())  # CN tenant-a

    class TLSTransport(StringTransport):
        def getPeerCertificate(self):
            return cert

    for mode, whoami in (("off", NOAUTH), ("cn", b"$8\r\ntenant-a\r\n")):
        node = make(**{"tls-auth-clients-user": mode, "requirepass": "s3cret", "user": "tenant-a on >pw ~* +@all"})
        assert node.connect(TLSTransport(peerAddress=_loopback().getPeer())).call("ACL", "WHOAMI") == whoami


# -- the table ---------------------------------------------------------------------

def test_every_directive_has_an_effect_test():
    """A new directive needs a test here showing what it does, or
    ``fixed`` (refused unless default) in disque.config."""
    assert set(EFFECTS) == {s.name for s in SPECS if not s.fixed}


@pytest.mark.parametrize("name", sorted(EFFECTS))
def test_directive_changes_behaviour(name, make, tmp_path, monkeypatch):
    fn = EFFECTS[name]
    args = {"make": make, "tmp_path": tmp_path, "monkeypatch": monkeypatch}
    fn(**{k: v for k, v in args.items() if k in fn.__code__.co_varnames[:fn.__code__.co_argcount]})


@pytest.mark.parametrize("name", sorted(s.name for s in SPECS if s.fixed))
def test_fixed_directive_refuses_other_values(name):
    spec = next(s for s in SPECS if s.name == name)
    other = {"str": "/tmp/x", "int": "3", "bool": "no" if spec.default else "yes", "octal": "700"}[spec.kind]
    with pytest.raises(ConfigError, match="unsupported value"):
        Config.defaults().apply_overrides({name: other})
    config = Config.defaults()
    with pytest.raises(Exception) as info:
        config.set(name.encode(), other.encode())
    assert info.value.args[0] == b"Unsupported CONFIG parameter: " + name.encode()


# -- details of some effects ---------------------------------------------------------

def test_soft_output_limit_allows_a_burst_shorter_than_its_seconds(make):
    node = make(**{"client-output-buffer-limit": "normal 0 100 2"})
    monitor, other = node.connect(), node.connect()
    monitor.call("MONITOR")
    monitor.proto.pauseProducing()
    for _ in range(5):
        other.call("PING")                     # above 100 bytes from now on
    node.advance(1.5)
    other.call("PING")
    assert not monitor.closed                  # 1.5 s over the soft limit: tolerated
    monitor.proto.resumeProducing()            # it caught up: the count starts again
    monitor.proto.pauseProducing()
    node.advance(2.5)
    other.call("PING")
    assert not monitor.closed
    for _ in range(5):
        other.call("PING")
    node.advance(2.5)
    other.call("PING")
    assert monitor.closed                      # over it for more than 2 s


def test_requests_queued_behind_a_parked_command_count_until_they_run(make):
    node = make(**{"client-query-buffer-limit": "1mb"})
    c, other = node.connect(), node.connect()
    c.proto.dataReceived(cmd("GETJOB", "FROM", "q"))      # parks: what follows waits
    big = cmd("PING", "x" * 300_000)
    for _ in range(3):
        c.proto.dataReceived(big)
    assert not c.closed and c.proto.queued > 900_000
    other.call("ADDJOB", "q", "job", "0")                 # GETJOB gets it, the PINGs run
    assert c.take().count(b"$300000\r\n") == 3 and c.proto.queued == 0
    c.proto.dataReceived(cmd("GETJOB", "FROM", "q"))      # parks again: the count starts from 0
    for _ in range(3):
        c.proto.dataReceived(big)
    assert not c.closed
    with captured_log() as events:
        c.proto.dataReceived(big)                         # 1.2 MB waiting: closed
    assert c.closed and c.tr.disconnected and c.proto.pending == type(c.proto.pending)()
    assert any("max query buffer length" in t for t in texts(events))
    assert node.connect().call("PING") == b"+PONG\r\n"


def test_a_client_parked_by_one_request_of_many_counts_the_rest(make):
    node = make(**{"client-query-buffer-limit": "1mb"})
    c = node.connect()
    c.proto.dataReceived(cmd("GETJOB", "FROM", "q") + cmd("PING", "x" * 600_000))
    assert not c.closed and c.proto.queued >= 600_000
    c.proto.dataReceived(cmd("PING", "x" * 600_000))
    assert c.closed


def test_a_hard_output_limit_stops_a_pipeline_of_big_replies_as_it_is_made(make):
    """Twenty SHOWs of a 200 KB job in one read: 4 MB of replies.  With a
    1 MB hard limit the client is dropped after the sixth, and the replies
    made are let go, not written."""
    for value, dropped in (("normal 0 0 0", False), ("normal 1mb 0 0", True)):
        node = make(**{"client-output-buffer-limit": value})
        job = node.connect().call("ADDJOB", "q", "b" * 200_000, "0").split(b"\r\n")[0][1:].decode()
        c = node.connect()
        shows = []
        real = node.runtime.run_command

        def counting(client, argv):
            shows.append(argv[0])
            return real(client, argv)

        node.runtime.run_command = counting
        with captured_log() as events:
            c.proto.dataReceived(cmd("SHOW", job) * 20)
        assert c.closed is dropped and c.tr.disconnected is dropped
        if dropped:
            assert c.take() == b"" and len(shows) == 6
            assert any("output buffer limits" in t for t in texts(events))
        else:  # BATCH_OUTPUT: the rest waits for the replies to be written
            assert c.take().count(b"b" * 200_000) == 6 and len(shows) == 6
            for _ in range(5):
                node.reactor.advance(0)
            assert c.take().count(b"b" * 200_000) == 14 and len(shows) == 20


def test_a_client_that_does_not_read_big_replies_stops_being_served(make):
    """Without limits: the batch stops at BATCH_OUTPUT, and while the
    transport is full (the client does not read) nothing more runs."""
    node = make()
    job = node.connect().call("ADDJOB", "q", "b" * 200_000, "0").split(b"\r\n")[0][1:].decode()
    c = node.connect()
    c.proto.dataReceived(cmd("SHOW", job) * 20 + cmd("PING"))
    assert c.take().count(b"b" * 200_000) == 6
    c.proto.pauseProducing()                   # the transport is full
    node.advance(1)
    assert c.take() == b"" and len(c.proto.pending) == 15 and not c.proto.idle()
    c.proto.resumeProducing()                  # it drained
    for _ in range(5):
        node.reactor.advance(0)
    rest = c.take()
    assert rest.count(b"b" * 200_000) == 14 and rest.endswith(b"+PONG\r\n")
    assert not c.proto.pending and c.proto.queued == 0 and c.proto.idle()


def test_monitors_and_waiting_clients_never_time_out(make):
    node = make(timeout="1")
    monitor, blocked = node.connect(), node.connect()
    monitor.call("MONITOR")
    blocked.proto.dataReceived(cmd("GETJOB", "TIMEOUT", "4000", "FROM", "q"))
    node.advance(3.5)
    assert not monitor.closed and not blocked.closed
    node.advance(1.0)                          # GETJOB timed out: a reply, which is activity
    assert blocked.take() == b"*-1\r\n" and not blocked.closed
    node.advance(2.5)
    assert blocked.closed and not monitor.closed


def test_config_set_timeout_starts_and_stops_the_check(make):
    node = make()
    c, idle = node.connect(), node.connect()
    c.call("CONFIG", "SET", "timeout", "1")
    for _ in range(5):
        node.advance(0.5)
        c.call("PING")
    assert idle.closed and not c.closed
    c2 = node.connect()
    c.call("CONFIG", "SET", "timeout", "0")
    node.advance(5)
    assert not c2.closed


def test_latency_monitor_history_reset_doctor(make):
    node = make(**{"latency-monitor-threshold": "1"})
    c = node.connect()
    assert b"no latency spike was observed" in c.call("LATENCY", "DOCTOR")
    c.call("DEBUG", "SLEEP", "0.003")
    node.advance(1.5)
    c.call("DEBUG", "SLEEP", "0.002")
    history = c.call("LATENCY", "HISTORY", "command")
    assert history.startswith(b"*2\r\n*2\r\n:%d\r\n" % int(T0))   # two seconds, two samples
    assert c.call("LATENCY", "HISTORY", "nothing") == b"*0\r\n"
    assert c.call("PING") and c.call("LATENCY", "LATEST").count(b"command") == 1  # PING is fast, not slow
    doctor = c.call("LATENCY", "DOCTOR")
    assert b"1. command: 2 latency spikes" in doctor and b"SLOWLOG GET" in doctor
    assert c.call("LATENCY", "RESET", "nothing") == b":0\r\n"
    assert c.call("LATENCY", "RESET", "COMMAND") == b":1\r\n"
    assert c.call("LATENCY", "LATEST") == b"*0\r\n"
    c.call("CONFIG", "SET", "latency-monitor-threshold", "0")
    c.call("DEBUG", "SLEEP", "0.003")
    assert c.call("LATENCY", "LATEST") == b"*0\r\n"
    assert b"Latency monitoring is disabled" in c.call("LATENCY", "DOCTOR")


def test_rename_command_disables_and_lists(make):
    c = make(**{"rename-command": 'DEBUG ""'}).connect()
    assert c.call("DEBUG", "JOBS") == b"-ERR unknown command 'DEBUG'\r\n"
    from disque.commands import TABLE
    assert c.call("COMMAND", "COUNT") == b":%d\r\n" % (len(TABLE) - 1)  # every command but DEBUG
    assert b"$5\r\ndebug\r\n" not in c.call("COMMAND")
    assert c.call("COMMAND", "INFO", "debug") == b"*1\r\n$-1\r\n"


@pytest.mark.parametrize("rename, message", [
    ("NOSUCH x", "rename-command NOSUCH 'x': no such command 'NOSUCH'"),
    ("DEBUG ping", "rename-command DEBUG 'ping': a command is already named 'ping'"),
])
def test_bad_rename_command_stops_start_up(tmp_path, rename, message):
    from disque.node.tap import Options, makeService

    options = Options()
    options.parseOptions(["--dir", str(tmp_path), "--set", "rename-command=" + rename])
    with pytest.raises(SystemExit) as info:
        makeService(options)
    assert str(info.value) == "disque: " + message


def test_appendonly_needs_a_persistence_that_keeps_a_file(make):
    with pytest.raises(ConfigError, match="appendonly: Unable to turn on AOF: this node keeps no file"):
        make(persistence="none", appendonly="yes")
    c = make(persistence="none").connect()
    assert c.call("CONFIG", "SET", "appendonly", "yes") == \
        b"-ERR Unable to turn on AOF: this node keeps no file (persistence none)\r\n"
    assert c.call("CONFIG", "GET", "appendonly") == b"*2\r\n$10\r\nappendonly\r\n$2\r\nno\r\n"


def test_watchdog_period_is_at_least_two_ticks(make):
    from disque.node.timers import Watchdog

    node = make(**{"watchdog-period": "1"})
    watchdog = next(s for s in node.service if isinstance(s, Watchdog))
    assert watchdog.period_ms == 200                   # hz 10: 2 ticks
    node.connect().call("CONFIG", "SET", "watchdog-period", "0")
    assert watchdog.period_ms == 0
