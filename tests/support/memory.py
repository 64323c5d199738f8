"""Nodes in memory for the protocol tier: no sockets, no real time.

Two sizes: :func:`make_runtime` is a bare ``NodeRuntime`` on a
``task.Clock`` with :func:`connect`-ed ``RespProtocol`` clients on string
transports; :class:`Node` is a whole started ``DisqueNodeService`` on a
``MemoryReactorClock`` (its directives, its directory, its listeners),
which the ``make`` fixture of ``tests/protocol/conftest.py`` builds.
"""

import os
import types
from contextlib import contextmanager

from twisted.internet import task
from twisted.internet.address import IPv4Address
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import formatEvent, globalLogPublisher

from disque.config import Config
from disque.node.service import DisqueNodeService, NodeRuntime
from disque.persistence.none import NoPersistence
from disque.resp.protocol import RespProtocol

from .resp import encode_command as cmd  # noqa: F401  (the tests' name for it)

T0 = 1_795_347_500.0  #: the clocks' start (a fixed date, in seconds)
#: Directives of every node in memory unless a test overrides them.  A
#: reply leaves with the read that asked for it (``output-flush read``): a
#: test's clock has no reactor turns, so the default ``turn`` would hold it
#: until the test advances time.  The process tier runs the default.
MEMORY_DEFAULTS = {"output-flush": "read"}
NOAUTH = b"-NOAUTH Authentication required.\r\n"
#: The peer of in-memory clients: on loopback, as the node's default bind
#: sees them (StringTransport's own default, 192.168.1.1, is a stranger
#: that protected mode refuses).
LOCAL_PEER = IPv4Address("TCP", "127.0.0.1", 54321)


# -- a bare runtime ------------------------------------------------------------------

class CountingTransport(StringTransport):
    def __init__(self, peer=LOCAL_PEER):
        super().__init__(peerAddress=peer)
        self.writes = 0

    def write(self, data):
        self.writes += 1
        super().write(data)


def memory_config(directives) -> Config:
    """The directives of a node in memory: the defaults, then
    :data:`MEMORY_DEFAULTS`, then ``directives``."""
    config = Config.defaults()
    config.apply_overrides({**MEMORY_DEFAULTS, **directives})
    return config


def make_runtime(**overrides):
    """(a NodeRuntime with the default directives and ``overrides``, its
    task.Clock at :data:`T0`)."""
    clock = task.Clock()
    clock.advance(T0)
    config = memory_config(overrides)
    return NodeRuntime(config, clock, NoPersistence(), lambda: None), clock


def connect(runtime, peer=LOCAL_PEER):
    """(a RespProtocol client of ``runtime``, its CountingTransport)."""
    proto = RespProtocol(runtime)
    transport = CountingTransport(peer)
    proto.makeConnection(transport)
    return proto, transport


def take(transport):
    """What ``transport`` holds, then empty it."""
    data = transport.value()
    transport.clear()
    return data


# -- a whole node service ----------------------------------------------------------

class Conn:
    def __init__(self, node, transport=None):
        self.node = node
        self.tr = transport or StringTransport(peerAddress=LOCAL_PEER)
        self.proto = RespProtocol(node.service.runtime)
        self.proto.makeConnection(self.tr)

    def call(self, *args) -> bytes:
        self.proto.dataReceived(cmd(*args))
        return self.take()

    def take(self) -> bytes:
        data = self.tr.value()
        self.tr.clear()
        return data

    @property
    def closed(self):
        return self.tr.disconnecting


class Node:
    """A started node service in memory."""

    def __init__(self, workdir, directives, start=True):
        os.makedirs(workdir, exist_ok=True)
        self.dir = str(workdir)
        self.config = memory_config({"dir": self.dir, **directives})
        self.reactor = MemoryReactorClock()
        self.reactor.advance(T0)
        self.service = DisqueNodeService(self.config, reactor=self.reactor, on_shutdown=lambda: None)
        if start:
            self.service.startService()

    @property
    def runtime(self):
        return self.service.runtime

    def connect(self, transport=None) -> Conn:
        return Conn(self, transport)

    def advance(self, seconds, step=0.05):
        for _ in range(int(round(seconds / step))):
            self.reactor.advance(step)


def ticks_in_one_second(service, reactor):
    """How many times the runtime ticks in one second of ``reactor``."""
    count = 0
    original = service.runtime.tick

    def counting():
        nonlocal count
        count += 1
        original()

    service.runtime.tick = counting
    for _ in range(100):
        reactor.advance(0.01)
    service.runtime.tick = original
    return count


def command(service, line):
    """One inline command through the client listener's factory of
    ``service`` (a connection on a StringTransport); its reply."""
    peer = IPv4Address("TCP", "127.0.0.1", 50000)
    proto = service.listeners[0].factory.buildProtocol(peer)
    transport = StringTransport(peerAddress=peer)
    proto.makeConnection(transport)
    proto.dataReceived(line + b"\r\n")
    return transport.value()


def meet_a_peer(service, reactor, host=b"127.0.0.1"):
    """CLUSTER MEET through a client connection, then one tick: the link's
    endpoint connects; return the connectTCP call (host, port, timeout,
    bindAddress)."""
    assert command(service, b"CLUSTER MEET %s 7712" % host) == b"+OK\r\n"
    reactor.advance(0.2)
    assert len(reactor.tcpClients) == 1
    host, port, _, timeout, bind = reactor.tcpClients[0]
    return host, port, timeout, bind


# -- the log ------------------------------------------------------------------------------

@contextmanager
def captured_log():
    """The events Twisted's global log publisher sees meanwhile (a list)."""
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(events.append)


def texts(events):
    return [formatEvent(e) for e in events]


class FakeSyslog(types.ModuleType):
    """A ``syslog`` module that records what it is told."""
    LOG_PID, LOG_NDELAY, LOG_USER, LOG_LOCAL0, LOG_LOCAL3 = 1, 8, 8, 128, 152
    LOG_DEBUG, LOG_NOTICE, LOG_WARNING, LOG_ERR, LOG_CRIT = 7, 5, 4, 3, 2

    def __init__(self):
        super().__init__("syslog")
        self.opened = None
        self.lines = []

    def openlog(self, ident, option, facility):
        self.opened = (ident, option, facility)

    def syslog(self, priority, text):
        self.lines.append((priority, text))
