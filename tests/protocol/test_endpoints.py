"""Listeners and bus links from Twisted endpoint strings (disque.node.listeners),
in memory: the node service on a MemoryReactorClock records what it listens
on and whom it connects to, and nothing touches a socket."""

import gc

import pytest
from twisted.application.internet import StreamServerEndpointService, TimerService
from twisted.internet.address import IPv4Address
from twisted.internet.error import CannotListenError
from twisted.internet.testing import MemoryReactorClock

from disque.config import Config
from disque.node.listeners import EndpointError, ListenError, beyond_loopback, bus_beyond_loopback, open_bus_refusal
from disque.node.timers import DirectiveTimer
from disque.node.service import DisqueNodeService
from disque.node.tap import Options, makeService
from tests.support.memory import command, meet_a_peer, memory_config


def build(tmp_path, reactor=None, **overrides):
    config = memory_config({"dir": str(tmp_path), "port": "7711", **overrides})
    reactor = reactor or MemoryReactorClock()
    return DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: None), reactor


def tcp_servers(reactor):
    """(port, backlog, interface) of every TCP listener, in order."""
    return [(port, backlog, interface) for port, _, backlog, interface in reactor.tcpServers]


def test_the_default_listeners_are_derived_from_port_bind_and_backlog(tmp_path):
    service, reactor = build(tmp_path, bind="127.0.0.1 ::1", **{"tcp-backlog": "77"})
    assert all(isinstance(s, StreamServerEndpointService) for s in service.listeners + service.bus_listeners)
    # the directive-driven timers (the tick, timeout, watchdog-period), and
    # the heap freezer where the runtime has gc.freeze (CPython)
    timers = [s.directive for s in service if isinstance(s, DirectiveTimer)]
    assert timers == ["hz", "timeout", "watchdog-period"] and service.cron.directive == "hz"
    assert len([s for s in service if isinstance(s, TimerService)]) == (1 if hasattr(gc, "freeze") else 0)
    service.startService()
    try:
        assert tcp_servers(reactor) == [(7711, 77, "127.0.0.1"), (7711, 77, "::1"),
                                        (17711, 77, "127.0.0.1"), (17711, 77, "::1")]
        assert [l.description for l in service.listeners] == [
            "tcp:7711:interface=127.0.0.1:backlog=77", "tcp6:7711:interface=\\:\\:1:backlog=77"]
        assert service.node.cluster.myself.port == 7711
        # INFO and CONFIG GET answer from the directives, as before
        assert b"tcp_port:7711\r\n" in command(service, b"INFO server")
        assert command(service, b"CONFIG GET bind") == b"*2\r\n$4\r\nbind\r\n$13\r\n127.0.0.1 ::1\r\n"
    finally:
        service.stopService()


def test_listen_directive_replaces_port_and_bind_for_clients(tmp_path):
    sock = str(tmp_path / "disque.sock")
    service, reactor = build(tmp_path, listen="tcp:7800:interface=127.0.0.2:backlog=9 unix:%s" % sock)
    service.startService()
    try:
        assert tcp_servers(reactor) == [(7800, 9, "127.0.0.2"),
                                        # the bus: beside the first client listener, on the bind addresses
                                        (17800, 511, "127.0.0.1")]
        assert [u[0] for u in reactor.unixServers] == [sock]
        assert service.listening_port == 7800 and service.node.cluster.myself.port == 7800
        assert command(service, b"CONFIG GET listen") == (
            b"*2\r\n$6\r\nlisten\r\n$%d\r\ntcp:7800:interface=127.0.0.2:backlog=9 unix:%s\r\n"
            % (len("tcp:7800:interface=127.0.0.2:backlog=9 unix:") + len(sock), sock.encode()))
    finally:
        service.stopService()


def test_cluster_listen_directive_replaces_the_bus_listeners(tmp_path):
    bus = "tcp:17711:interface=10.0.0.1 tcp:17711:interface=10.0.0.2"
    service, reactor = build(tmp_path, **{"cluster-listen": bus, "cluster-password": "s3cret"})
    service.startService()
    try:
        assert tcp_servers(reactor) == [(7711, 511, "127.0.0.1"), (17711, 50, "10.0.0.1"), (17711, 50, "10.0.0.2")]
    finally:
        service.stopService()


def test_a_bus_away_from_the_client_port_plus_10000_is_logged(tmp_path):
    from twisted.logger import globalLogPublisher

    events = []
    globalLogPublisher.addObserver(events.append)
    service, reactor = build(tmp_path, **{"cluster-listen": "tcp:17999:interface=127.0.0.1"})
    try:
        service.startService()
        service.stopService()
    finally:
        globalLogPublisher.removeObserver(events.append)
    warnings = [e for e in events if e.get("log_level") is not None and e["log_level"].name == "warn"]
    assert [(e["bus"], e["port"]) for e in warnings] == [(17711, 7711)]


class FakePort:
    def __init__(self, address):
        self.address = address

    def getHost(self):
        return self.address

    def stopListening(self):
        return None


class EphemeralPorts(MemoryReactorClock):
    """Port 0 gets a port, as the system would give one."""

    def listenTCP(self, port, factory, backlog=50, interface=""):
        port = port or 40123
        self.tcpServers.append((port, factory, backlog, interface))
        return FakePort(IPv4Address("TCP", interface, port))


def test_port_0_listens_on_a_free_port_and_the_bus_follows_it(tmp_path):
    service, reactor = build(tmp_path, reactor=EphemeralPorts(), port="0")
    service.startService()
    try:
        assert tcp_servers(reactor) == [(40123, 511, "127.0.0.1"), (50123, 511, "127.0.0.1")]
        assert service.node.cluster.myself.port == 40123
        assert b"tcp_port:0\r\n" in command(service, b"INFO server")  # the directive, as before
    finally:
        service.stopService()


class PortInUse(MemoryReactorClock):
    def listenTCP(self, port, factory, backlog=50, interface=""):
        raise CannotListenError(interface, port, OSError(98, "Address already in use"))


def test_a_port_that_cannot_be_listened_on_stops_start_up(tmp_path):
    """Not a node running without its listener, as a plain
    StreamServerEndpointService would leave it (it only logs).  The error
    is one line naming the directive, the address and the cause (twistd
    shows it as is: tests/process/test_e2e_start_stop.py)."""
    service, reactor = build(tmp_path, reactor=PortInUse())
    with pytest.raises(CannotListenError) as e:
        service.startService()
    assert isinstance(e.value, ListenError)
    assert str(e.value) == "port: can't listen on 127.0.0.1:7711: Address already in use"
    assert not reactor.getDelayedCalls()  # no tick was started


def test_links_connect_from_the_first_bind_address_by_default(tmp_path):
    service, reactor = build(tmp_path)
    service.startService()
    try:
        assert meet_a_peer(service, reactor) == ("127.0.0.1", 17712, 5, ("127.0.0.1", 0))
    finally:
        service.stopService()


def test_links_to_a_peer_of_another_family_leave_from_anywhere(tmp_path):
    service, reactor = build(tmp_path, bind="127.0.0.1 ::1")
    service.startService()
    try:
        assert meet_a_peer(service, reactor, host=b"::1") == ("::1", 17712, 5, None)
    finally:
        service.stopService()


def test_cluster_connect_directive_builds_the_links(tmp_path):
    service, reactor = build(tmp_path, **{"cluster-connect": "tcp:timeout=9"})
    service.startService()
    try:
        assert meet_a_peer(service, reactor) == ("127.0.0.1", 17712, 9, None)
    finally:
        service.stopService()


@pytest.mark.parametrize("overrides, message", [
    ({"listen": "tcp:abc"}, "listen: bad endpoint 'tcp:abc': 'abc' is not a number"),
    ({"listen": "tcp:7711 nope:1"}, "listen: bad endpoint 'nope:1': Unknown endpoint type: 'nope'"),
    ({"listen": "tcp:7711:colour=red"}, "listen: bad endpoint 'tcp:7711:colour=red': got an unexpected keyword "
                                        "argument 'colour'"),
    ({"cluster-listen": "tcp"}, "cluster-listen: bad endpoint 'tcp': missing 1 required positional argument"),
    ({"cluster-connect": "tcp:timeout=soon"}, "cluster-connect: bad endpoint 'tcp:timeout=soon': 'soon' is not a "
                                              "number"),
    ({"cluster-connect": "carrier-pigeon"}, "cluster-connect: bad endpoint 'carrier-pigeon': Unknown endpoint "
                                            "type: 'carrier-pigeon'"),
])
def test_a_bad_endpoint_string_is_refused_before_anything_listens(tmp_path, overrides, message):
    reactor = MemoryReactorClock()
    with pytest.raises(EndpointError) as e:
        build(tmp_path, reactor=reactor, **overrides)
    assert str(e.value).startswith(message)
    assert reactor.tcpServers == []
    # twistd disque: one line, exit status 1
    options = Options()
    options.parseOptions(["--dir", str(tmp_path)] + ["--set=%s=%s" % kv for kv in overrides.items()])
    with pytest.raises(SystemExit) as e:
        makeService(options, reactor=reactor)
    assert str(e.value).startswith("disque: " + message) and "\n" not in str(e.value)
    assert reactor.tcpServers == []


def test_twistd_listen_option_reaches_the_listeners(tmp_path):
    options = Options()
    options.parseOptions(["--dir", str(tmp_path), "--listen", "tcp:7900:interface=127.0.0.3 tcp:7901"])
    reactor = MemoryReactorClock()
    service = makeService(options, reactor=reactor)
    service.startService()
    try:
        assert [(p, i) for p, _, i in tcp_servers(reactor)] == [(7900, "127.0.0.3"), (7901, ""), (17900, "127.0.0.1")]
    finally:
        service.stopService()


# -- a bus beyond loopback must be closed (docs/security.md) -------------------

@pytest.mark.parametrize("description, where", [
    ("tcp:17711:interface=127.0.0.1", None),
    ("tcp:17711:interface=127.9.8.7:backlog=5", None),  # all of 127.0.0.0/8
    ("tcp6:17711:interface=\\:\\:1", None),
    ("tcp:17711:127.0.0.1", None),  # the interface as tcp's positional argument
    ("TCP:port=17711:interface=127.0.0.1", None),
    ("unix:/run/disque-bus.sock", None),  # only this machine reaches it
    ("ssl:17711:privateKey=/etc/k\\:1.pem:interface=127.0.0.1", None),
    ("tcp:17711", "every interface"),
    ("tcp:17711:interface=0.0.0.0", "every interface"),
    ("tcp6:17711", "every interface"),
    ("tcp6:17711:interface=\\:\\:", "every interface"),
    ("tcp:17711:interface=10.0.0.5", "10.0.0.5"),
    ("tcp:17711:10.0.0.5", "10.0.0.5"),
    ("tcp6:17711:interface=fe80\\:\\:1", "fe80::1"),
    ("tcp:17711:interface=localhost", "localhost"),  # a name may resolve to anything
    ("ssl:17711:privateKey=k.pem", "every interface"),
    ("systemd:domain=INET:index=0", "systemd:domain=INET:index=0"),  # cannot tell: the string itself
])
def test_beyond_loopback_reads_where_an_endpoint_string_listens(description, where):
    assert beyond_loopback(description) == where


def test_the_bus_is_beyond_loopback_where_bind_or_cluster_listen_puts_it():
    def places(**directives):
        config = Config.defaults()
        config.apply_overrides(directives)
        return bus_beyond_loopback(config)

    assert places() == [] and places(bind="127.0.0.1 ::1") == []
    assert places(bind="127.0.0.1 10.0.0.5") == ["10.0.0.5"]
    assert places(bind="0.0.0.0") == ["every interface"]
    # cluster-listen replaces what bind derives, both ways
    assert places(bind="0.0.0.0", **{"cluster-listen": "tcp:17711:interface=127.0.0.1"}) == []
    assert places(**{"cluster-listen": "tcp:17711 unix:/tmp/b.sock"}) == ["every interface"]


def test_a_bus_beyond_loopback_needs_a_password_tls_or_a_trusted_network():
    def refusal(password="", **directives):
        config = Config.defaults()
        config.apply_overrides(dict({"bind": "10.0.0.5"}, **directives))
        return open_bus_refusal(config, password)

    assert refusal() == ("the cluster bus listens beyond loopback (10.0.0.5) with neither cluster-password nor "
                         "tls-cluster yes: anyone who can reach it could join the cluster; set one of them, or "
                         "cluster-trusted-network yes if every host that can reach the bus may join")
    assert "\n" not in refusal()
    assert refusal("s3cret") is None
    assert refusal(**{"cluster-trusted-network": "yes"}) is None
    assert refusal(**{"tls-cluster": "yes"}) is None  # (a node needs certificates too: tests/protocol/test_tls.py)
    assert refusal(bind="127.0.0.1") is None
