"""IOSimCluster: real node services (``DisqueNodeService``) speaking the real
RESP and bus protocols to each other over ``twisted.test.iosim``, on memory
reactors with a shared fake clock: for what crosses the wire (a plugin's
effect on a whole node, the bus codec, links, timers).
"""

import os
import struct

from twisted.internet import address, error
from twisted.python.failure import Failure
from twisted.test import iosim

from ..bus import wire
from ..bus.links import BUS_PORT_OFFSET
from .client import IOSimClient


class _SimTransport(iosim.FakeTransport):
    """An iosim transport with real addresses (the node reads its peers'
    host from them), a ``held`` switch (what this end wrote waits, in
    order, until released) and a tap that sees the bytes this end's
    protocol receives."""

    def __init__(self, protocol, is_server, host, peer, tap=None):
        super().__init__(protocol, is_server, hostAddress=host, peerAddress=peer)
        self.held = False
        self.tap = tap

    def getOutBuffer(self):
        if self.held:
            return None
        return super().getOutBuffer()

    def bufferReceived(self, buf):
        if self.tap is not None:
            self.tap(buf)
        super().bufferReceived(buf)

    def drop(self):
        """The connection breaks: what is in flight is lost."""
        self.stream = []
        self.held = False
        self.loseConnection()


class _FrameTap:
    """Decodes the bus frames one node receives from another on one
    connection (length-prefixed, as ``Int32StringReceiver`` writes them) and
    logs ``(sender, receiver, message)``; the bytes themselves go to the
    protocol unchanged."""

    def __init__(self, log, sender, receiver):
        self.log, self.sender, self.receiver = log, sender, receiver
        self.buffer = b""

    def __call__(self, data):
        self.buffer += data
        while len(self.buffer) >= 4:
            n = struct.unpack(">I", self.buffer[:4])[0]
            if len(self.buffer) < 4 + n:
                return
            frame, self.buffer = self.buffer[4:4 + n], self.buffer[4 + n:]
            try:
                _, msg = wire.decode(frame)
            except wire.WireError as e:
                msg = e  # the receiver drops the link; the log shows why
            self.log.append((self.sender, self.receiver, msg))


class _SimConnection:
    """One connection: its pump and which node (index, or None for a test
    client) is at each end."""

    __slots__ = ("pump", "client_node", "server_node", "bus")

    def __init__(self, pump, client_node, server_node, bus):
        self.pump, self.client_node, self.server_node, self.bus = pump, client_node, server_node, bus

    def joins(self, i, j):
        return {self.client_node, self.server_node} == {i, j}

    def transport_of(self, i):
        """The transport node ``i`` writes to."""
        return self.pump.clientIO if self.client_node == i else self.pump.serverIO

    @property
    def gone(self):
        return self.pump.clientIO.disconnected and self.pump.serverIO.disconnected

    def drop(self):
        """Break the connection at both ends (bytes in flight are lost)."""
        self.pump.clientIO.drop()
        self.pump.serverIO.drop()


class IOSimCluster:
    """Real Disque nodes in one process, wired in memory over
    ``twisted.test.iosim``: no sockets, no real time.

    Each node is a real :class:`~disque.node.service.DisqueNodeService` on its own
    ``MemoryReactorClock``, started as ``twistd`` would start it: it listens
    for clients and for the bus (``listenTCP`` on the memory reactor) and
    opens its links to peers (``connectTCP``).  The cluster completes each
    connection attempt by building both ends' protocols from the real
    factories and joining them with ``FakeTransport``s and an ``IOPump``, so
    every byte between nodes is the real bus wire format through the real
    bus protocol, and every client byte goes through the real RESP protocol.

    Invariants: all nodes' clocks show the same time, and only
    :meth:`advance` moves it (by jumping from one scheduled call to the
    next, so timers fire exactly when due: at the default ``hz`` a simulated
    second is a few dozen timer events, milliseconds of real time);
    :meth:`pump` delivers bytes until nothing moves, so after either call
    every message that could be delivered was, except what :meth:`hold`
    keeps in flight.  A connection attempt to a node that is not listening,
    killed or cut off (:meth:`cut`) is refused at once (a real partition
    would time out instead; the links retry either way, every 100 ms:
    ``disque.bus.links.RECONNECT_DELAY``).

        cluster = IOSimCluster(2, tmp_path)
        a, b = cluster.client(0), cluster.client(1)
        a.call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[1])
        cluster.advance(1.0)
        assert b"cluster_reachable_nodes:1" in b.call("CLUSTER", "INFO")

    ``frames`` logs every bus message delivered, as ``(sender index,
    receiver index, message)`` with the records of
    :mod:`disque.core.messages` (a frame that does not decode is logged as
    its ``WireError``).  Call :meth:`stop` at the end.
    """

    HOST = "127.0.0.1"

    def __init__(self, n, directory, base_port=7101, overrides=None, start_time=1_795_347_500.0):
        """``n`` nodes on ports ``base_port + i`` of 127.0.0.1 (bus: port +
        10000), each with its directory ``<directory>/node-<i>`` (the node
        file goes there) and the config directives of ``overrides`` (name
        -> value, as ``twistd disque --set`` takes them); clocks start at
        ``start_time`` (Unix seconds).  The nodes are started, not met."""
        # Imported here: the core's SimCluster above needs none of this.
        from twisted.internet.testing import MemoryReactorClock

        from ..config import Config
        from ..node.service import DisqueNodeService

        self.ports = [base_port + i for i in range(n)]
        self.reactors = []
        self.services = []
        self.alive = []
        self.connections = []
        self.frames = []
        self.cuts = set()  # frozenset({i, j}) of nodes that cannot talk
        self.one_way = set()  # (i, j): i cannot open connections to j
        self.holds = set()  # (i, j): what i writes to j waits
        self._next_client_port = 50000
        for i, port in enumerate(self.ports):
            reactor = MemoryReactorClock()
            reactor.advance(start_time)
            node_dir = os.path.join(str(directory), "node-%d" % i)
            os.makedirs(node_dir, exist_ok=True)
            config = Config.defaults()
            # gc-freeze-interval 0: a node in a test process must not freeze
            # the test runner's heap.  output-flush read: output leaves with
            # the read or frame that made it (a test clock has no reactor
            # turns to end).
            config.apply_overrides(dict({"port": str(port), "dir": node_dir, "bind": self.HOST,
                                         "gc-freeze-interval": "0", "output-flush": "read"},
                                        **(overrides or {})))
            service = DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: None)
            self.reactors.append(reactor)
            self.services.append(service)
            self.alive.append(True)
        for service in self.services:
            service.startService()
        self.pump()

    @property
    def now(self) -> float:
        """The nodes' clock (reactor seconds)."""
        return self.reactors[0].seconds()

    # -- clients -------------------------------------------------------------

    def client(self, i) -> IOSimClient:
        """A new RESP client connected to node ``i``'s client port."""
        return self.connect(i, IOSimClient(self))

    def connect(self, i, protocol, bus=False):
        """Connect ``protocol`` (any Twisted protocol: a test's stranger) to
        node ``i``'s client port, or its bus port with ``bus``; returns it."""
        port = self.ports[i] + (BUS_PORT_OFFSET if bus else 0)
        server_factory = self._listener(i, port)
        if server_factory is None:
            raise AssertionError("node %d does not listen on %d" % (i, port))
        self._join(protocol, None, server_factory, i, port, bus=False)
        self.pump()
        return protocol

    # -- time and bytes ------------------------------------------------------

    def pump(self, limit=100_000):
        """Run what is due now and deliver bytes (completing connection
        attempts) until nothing moves."""
        for _ in range(limit):
            moved = False
            for reactor in self.reactors:
                if any(c.getTime() <= reactor.seconds() for c in reactor.getDelayedCalls()):
                    reactor.advance(0)
                    moved = True
            moved = self._complete_connections() or moved
            for conn in self.connections:
                moved = conn.pump.pump(advanceClock=False) or moved
            self.connections = [c for c in self.connections if not c.gone]
            if not moved:
                return
        raise AssertionError("the cluster is still busy after %d rounds" % limit)

    def advance(self, seconds):
        """Move every node's clock ``seconds`` forward, running each timer
        when it is due and delivering what it causes before the next."""
        end = self.now + seconds
        self.pump()
        while True:
            due = [c.getTime() for r in self.reactors for c in r.getDelayedCalls()]
            at = min([t for t in due if t <= end], default=None)
            if at is None:
                break
            self._set_time(at)
            self.pump()
        self._set_time(end)
        self.pump()

    def _set_time(self, at):
        for reactor in self.reactors:
            if at > reactor.seconds():
                reactor.advance(at - reactor.seconds())

    # -- faults --------------------------------------------------------------

    def hold(self, i, j):
        """What node ``i`` writes to node ``j`` stays in flight (in order)
        until :meth:`release`."""
        self.holds.add((i, j))
        self._apply_holds()

    def release(self, i, j):
        """What node ``i`` held for node ``j`` goes, in order, and is pumped."""
        self.holds.discard((i, j))
        self._apply_holds()
        self.pump()

    def cut(self, i, j):
        """Nodes ``i`` and ``j`` can no longer talk: their connections break
        (bytes in flight are lost) and new ones are refused until
        :meth:`heal`."""
        self.cuts.add(frozenset((i, j)))
        for conn in self.connections:
            if conn.bus and conn.joins(i, j):
                conn.drop()
        self.pump()

    def cut_one_way(self, i, j):
        """Node ``i`` can no longer open connections to node ``j``: its link
        to ``j`` breaks and reconnecting is refused until :meth:`heal`,
        while the connections ``j`` opens to ``i`` carry on (as when ``i``
        has not reconnected yet to a ``j`` that restarted)."""
        self.one_way.add((i, j))
        for conn in self.connections:
            if conn.bus and conn.client_node == i and conn.server_node == j:
                conn.drop()
        self.pump()

    def heal(self):
        """Every cut pair may connect again (the links reconnect on their
        own schedule)."""
        self.cuts.clear()
        self.one_way.clear()
        self.pump()

    def kill(self, i):
        """Node ``i`` dies: every connection to it breaks, nothing reaches
        it any more and its timers stop."""
        self.alive[i] = False
        for conn in self.connections:
            if i in (conn.client_node, conn.server_node):
                conn.drop()
        self.pump()
        self.services[i].stopService()
        for call in self.reactors[i].getDelayedCalls():
            if call.active():
                call.cancel()

    def stop(self):
        """Stop every live node (the end of a test)."""
        for i, service in enumerate(self.services):
            if self.alive[i]:
                self.alive[i] = False
                service.stopService()

    # -- wiring --------------------------------------------------------------

    def _listener(self, i, port):
        """The factory node ``i`` listens with on ``port``, or None."""
        if not self.alive[i]:
            return None
        for lport, factory, _, interface in self.reactors[i].tcpServers:
            if lport == port and interface in (self.HOST, "", "0.0.0.0", "::"):
                return factory
        return None

    def _complete_connections(self):
        """Join (or refuse) the connection attempts every node has made."""
        moved = False
        for i, reactor in enumerate(self.reactors):
            while reactor.tcpClients:
                host, port, factory, _, _ = reactor.tcpClients.pop(0)
                connector = reactor.connectors.pop(0)
                moved = True
                target = next((j for j in range(len(self.ports)) if self._listener(j, port) is not None), None)
                server_factory = None
                if host == self.HOST and target is not None and self.alive[i] \
                        and frozenset((i, target)) not in self.cuts and (i, target) not in self.one_way:
                    server_factory = self._listener(target, port)
                if server_factory is None:
                    factory.clientConnectionFailed(connector, Failure(error.ConnectionRefusedError()))
                    continue
                proto = factory.buildProtocol(address.IPv4Address("TCP", host, port))
                self._join(proto, i, server_factory, target, port, bus=port != self.ports[target])
        return moved

    def _join(self, client_proto, client_node, server_factory, server_node, port, bus):
        self._next_client_port += 1
        client_addr = address.IPv4Address("TCP", self.HOST, self._next_client_port)
        server_addr = address.IPv4Address("TCP", self.HOST, port)
        server_proto = server_factory.buildProtocol(client_addr)
        client_tap = server_tap = None
        if bus:
            client_tap = _FrameTap(self.frames, server_node, client_node)
            server_tap = _FrameTap(self.frames, client_node, server_node)
        cio = _SimTransport(client_proto, False, client_addr, server_addr, client_tap)
        sio = _SimTransport(server_proto, True, server_addr, client_addr, server_tap)
        pump = iosim.connect(server_proto, sio, client_proto, cio, greet=False)
        self.connections.append(_SimConnection(pump, client_node, server_node, bus))
        self._apply_holds()

    def _apply_holds(self):
        for conn in self.connections:
            if conn.bus:
                conn.pump.clientIO.held = (conn.client_node, conn.server_node) in self.holds
                conn.pump.serverIO.held = (conn.server_node, conn.client_node) in self.holds
