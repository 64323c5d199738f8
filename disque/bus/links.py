"""One reconnecting outbound link per known peer.

The core says which peers it wants links to (``Link``/``Unlink``/``Rekey``
effects); :class:`Links` keeps a ``ClientService`` per peer, which tries
again every ``RECONNECT_DELAY`` (100 ms) while the peer is down, as the
original's cluster cron reconnects every lost link at each of its runs,
and reports each new connection to the runtime (the core then sends MEET
or PING on it).  So a peer that comes back is asked within 100 ms, and its
PONG clears its failure flags (:mod:`disque.core.membership`) as soon as
the original's would, even if its own link to us is not up yet.
Each link's endpoint comes from the node's ``BusConnector``
(``disque.node.listeners``: the ``cluster-connect`` endpoint string, TCP by
default; with ``tls-cluster yes`` wrapped in TLS, and then a link is up
when its handshake is done, see :class:`_TLSLinkProtocol`).  Messages to a peer whose link is down are dropped: every Disque
message is either retried by its sender's state machine (REPLJOB every
50 ms, SETACK with backoff, WILLQUEUE/QUEUED each retry) or best effort by
design.

Logs for operators: one line when a link is lost and one when it comes
back, never a line per reconnection attempt (``ClientService`` logs each
retry at info level: with one dead peer that would be ten lines a second).
"""

from twisted.application.internet import ClientService
from twisted.internet.interfaces import IHandshakeListener
from twisted.internet.protocol import Factory
from twisted.logger import Logger
from zope.interface import implementer

from ..io.logs import logger, node_log
from .protocol import BusProtocol

log = logger("disque.bus")


def _without_retries(event):
    """ClientService's events, less its "Scheduling retry" lines."""
    if not str(event.get("log_format", "")).startswith("Scheduling retry"):
        node_log(event)


class _PeerService(ClientService):
    _log = Logger(namespace="disque.bus.links", observer=_without_retries)


#: Peers' buses listen on their advertised client port + this.
BUS_PORT_OFFSET = 10000


class _LinkFactory(Factory):
    noisy = False
    def __init__(self, link):
        self.link = link

    def buildProtocol(self, addr):
        link = self.link
        if link.links.tls:
            protocol = _TLSLinkProtocol(link, link.runtime, link.node_id, link.connected)
        else:
            protocol = BusProtocol(link.runtime, link.node_id, link.connected)
        link.connection = protocol
        return protocol


@implementer(IHandshakeListener)
class _TLSLinkProtocol(BusProtocol):
    """A link under TLS (``tls-cluster yes``) is up once the handshake is
    done, the peer's certificate verified -- not when TCP connects: a peer
    without a certificate of the CA is never up (no MEET or PING goes to
    it, no "back"/"lost" line per retry), and the failure is logged once
    until a handshake succeeds.  With a ``cluster-password`` too, it is up
    once both handshakes are done."""

    handshake_done = False

    def __init__(self, link, *args):
        super().__init__(*args)
        self.link = link

    def _link_up(self):
        if self.handshake_done:
            super()._link_up()

    def handshakeCompleted(self):
        if self.handshake_done:  # once: a renegotiation is not a new link
            return
        self.handshake_done = True
        self.link.tls_failing = False
        if self.authenticated:  # else when the cluster-password handshake is done too
            super()._link_up()

    def connectionLost(self, reason):
        if not self.handshake_done and not self.link.tls_failing:
            self.link.tls_failing = True
            log.warn("Bus link to {peer}: no TLS handshake ({error}), retrying", peer=self.link.describe(),
                     error=self.link.links.connector.tls_error_text(reason.value))
        super().connectionLost(reason)


#: Seconds between two attempts to connect a lost link, however many
#: failed: the original's cluster cron (every 100 ms) connects each node
#: without a link.  A connection attempt to a dead peer is cheap (refused,
#: or left pending until the endpoint's timeout).
RECONNECT_DELAY = 0.1

#: Seconds a stopped link's connection has to close cleanly (what was
#: written sent; under TLS, the peer's close_notify back) before it is
#: aborted: a peer that stopped reading or answering (a stopped process, a
#: half-open connection) would hold it, and the node stopping, for ever.
CLOSE_GRACE = 2.0


class PeerLink:
    def __init__(self, links, node_id, host, port):
        self.runtime = links.runtime
        self.node_id = node_id
        self.host = host
        self.port = port
        self.protocol = None
        self.connection = None  # the latest connection of the link, up or not (_LinkFactory)
        self.links = links
        self.tls_failing = False  # a TLS handshake failed, and none succeeded since (logged once)
        endpoint = links.connector.endpoint(host.decode(), port + BUS_PORT_OFFSET)
        self.service = _PeerService(endpoint, _LinkFactory(self), retryPolicy=links.retry_policy,
                                    clock=links.reactor)
        self.service.startService()

    def describe(self) -> str:
        return "%s (%s:%d)" % (self.node_id[:8].decode(errors="replace"), self.host.decode(errors="replace"),
                               self.port)

    def connected(self, protocol):
        self.protocol = protocol
        lost_at = self.links.down_since.pop(self.node_id, None)
        if lost_at is not None:
            log.info("Bus link to {peer} is back after {seconds:.1f} s", peer=self.describe(),
                     seconds=self.links.reactor.seconds() - lost_at)
        self.runtime.bus_link_up(self.node_id)

    def lost(self, protocol):
        if self.connection is protocol:
            self.connection = None
        if self.protocol is protocol:
            self.protocol = None
            if self.node_id not in self.links.down_since:
                self.links.down_since[self.node_id] = self.links.reactor.seconds()
                log.info("Bus link to {peer} lost, reconnecting", peer=self.describe())
            return True
        return False

    def send(self, frame):
        if self.protocol is not None:
            self.protocol.send_frame(frame)
            return True
        return False

    def rename(self, node_id):
        self.node_id = node_id
        if self.protocol is not None:
            self.protocol.node_id = node_id

    def stop(self):
        """Close the link: a Deferred that fires once its connection is
        closed, cleanly or, after ``CLOSE_GRACE`` seconds, aborted."""
        self.protocol = None
        self.links.cycle_released()  # the ClientService is a cycle
        connection, self.connection = self.connection, None
        if connection is not None:
            connection.unregister()  # else the transport waits for it (BusProtocol.unregister)
        stopped = self.service.stopService()
        if connection is not None and not stopped.called:
            timer = self.links.reactor.callLater(CLOSE_GRACE, self._abort, connection)
            stopped.addBoth(_cancelling, timer)
        return stopped

    def _abort(self, connection):
        if not getattr(connection.transport, "connected", False):
            return
        log.info("Bus link to {peer} not closed after {grace:g} s (the peer does not answer): aborted",
                 peer=self.describe(), grace=CLOSE_GRACE)
        connection.transport.abortConnection()


def _cancelling(result, timer):
    if timer.active():
        timer.cancel()
    return result


class Links:
    """The node's outbound links, by peer ID; ``connector.endpoint(host,
    port)`` makes the client endpoint of each, and with ``tls-cluster yes``
    ``connector.tls_error_text(error)`` words a failed handshake.
    ``cycle_released()`` is called each time a link lets go of a reference
    cycle (a link stopped, a failed connection attempt): the node passes
    its heap freezer's (:func:`disque.node.heap.frozen_cycles_released`)."""

    def __init__(self, reactor, runtime, connector, cycle_released):
        self.reactor = reactor
        self.runtime = runtime
        self.connector = connector
        self.cycle_released = cycle_released
        self.tls = getattr(connector, "tls", None) is not None  # tls-cluster yes: links are up after the handshake
        self.by_id = {}
        # node ID -> when its link went down (reactor seconds), until it is
        # back: kept here, not on the PeerLink, because the core may replace
        # a peer's link (new address, new handshake) while it is down.
        self.down_since = {}
        # node ID -> the latest connection that node opened to our bus port:
        # frames for it go there while our own link to it is down (see send).
        self.inbound = {}

    def retry_policy(self, attempt):
        """The delay before reconnecting after ``attempt`` failures: always
        ``RECONNECT_DELAY``, no backoff.  A failed attempt may leave a
        reference cycle the heap freezer holds: say so."""
        self.cycle_released()
        return RECONNECT_DELAY

    def ensure(self, node_id, host, port):
        link = self.by_id.get(node_id)
        if link is not None and (link.host, link.port) == (host, port):
            return
        if link is not None:
            link.stop()
        self.by_id[node_id] = PeerLink(self, node_id, host, port)

    def drop(self, node_id):
        self.down_since.pop(node_id, None)
        link = self.by_id.pop(node_id, None)
        if link is not None:
            link.stop()

    def rekey(self, old, new):
        link = self.by_id.pop(old, None)
        if link is None:
            return
        stale = self.by_id.pop(new, None)
        if stale is not None:
            stale.stop()
        link.rename(new)
        self.by_id[new] = link
        if link.protocol is not None and new in self.down_since:
            # a handshake (temporary ID) reached a peer whose link was down
            log.info("Bus link to {peer} is back after {seconds:.1f} s", peer=link.describe(),
                     seconds=self.reactor.seconds() - self.down_since.pop(new))

    def send(self, node_id, frame):
        """Send on our link to ``node_id``; while it is down (connecting, or
        waiting to try again), on the connection that node opened to us, if
        any: an answer to a node that just came back (GOTJOB, SETACK,
        QUEUED) must not wait for our next attempt or be lost to it.  True
        if the frame went somewhere."""
        link = self.by_id.get(node_id)
        if link is not None and link.send(frame):
            return True
        inbound = self.inbound.get(node_id)
        if inbound is not None and not inbound.closed:
            inbound.send_frame(frame)
            return True
        return False

    def inbound_from(self, protocol, node_id):
        """``protocol``, a connection to our bus port, comes from ``node_id``."""
        self.inbound[node_id] = protocol

    def inbound_lost(self, protocol):
        if self.inbound.get(protocol.sender) is protocol:
            del self.inbound[protocol.sender]

    def lost(self, protocol):
        link = self.by_id.get(protocol.node_id)
        return link is not None and link.lost(protocol)

    def stop_all(self):
        """Stop every link: a ``("the bus link to <peer>", Deferred)``
        pair each, the Deferred firing once the link is closed."""
        links, self.by_id = list(self.by_id.values()), {}
        return [("the bus link to %s" % link.describe(), link.stop()) for link in links]
