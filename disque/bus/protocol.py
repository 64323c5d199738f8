"""The cluster bus protocol: length-prefixed frames of :mod:`disque.bus.wire`.

One class serves both directions: connections peers open to our bus port
(``node_id`` None: we learn the sender from each frame's header) and the
outbound links we keep to each peer (``node_id`` set by the link).  Frames
go to the runtime, which hands them to the pure core.  A frame that fails
to decode, or a length above ``MAX_LENGTH``, drops the connection: a peer
that speaks garbage is not a peer, and its link will reconnect clean.

With ``cluster-password`` set, a connection first runs the handshake of
:mod:`disque.bus.auth` (both directions): until the peer has proved it
knows the password no frame of it reaches the node, an outbound link is
not reported up (so nothing is sent on it), and frames are limited to the
handshake's size.  A failed or timed-out handshake closes the connection
and is counted (INFO ``bus_auth_failures``, :mod:`disque.access.failed_auth`).

A connection to our bus port is *unproven* until it has shown it speaks
the protocol: with ``cluster-password`` until the handshake is done,
without it until a frame decoded (a peer's first frame is its MEET or
PING).  Once a frame says it comes from a member of the cluster (the core
decides: :mod:`disque.core.membership`), the connection is that member's:
frames for it may go there while our own link to it is down
(:meth:`disque.bus.links.Links.send`).

Limits (docs/limits.md):

* at most ``MAX_UNPROVEN`` unproven connections at once: past it a new
  one is closed at once (counted in ``bus_auth_failures`` and logged once
  a minute per source, as a failed handshake); each has ``auth.TIMEOUT``
  seconds to prove itself, then it is closed and counted the same way;
* a frame is at most ``MAX_FRAME`` bytes, and at most ``MAX_FIRST_FRAME``
  on a connection to our bus port until a frame came from a member
  (whoever connects must first speak the protocol as a member: a stranger
  has nothing to send that needs more);
* a frame's body is gathered in a list of reads and joined once, so a peer
  sending a big frame in small pieces costs O(frame), not O(frame^2);
* ``cluster-link-sendbuf-limit``: the protocol is the streaming producer of
  its transport, only to learn when the transport's buffer is full (the
  peer does not read; reading from it goes on).  Frames written from then
  on are counted, and past the limit the connection is aborted: a link
  reconnects, and what its frames carried is retried by the sender's state
  machine (see disque.bus.links), so nothing is lost.
"""

import struct

from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.protocols.basic import Int32StringReceiver
from zope.interface import implementer

from ..io.batch_output import BatchOutput, write_now
from ..io.logs import logger
from . import auth, wire

log = logger("disque.bus")

# A job body may be as large as a client bulk (512 MB) plus its record.
MAX_FRAME = 512 * 1024 * 1024 + 64 * 1024
# A MEET or PING with the most gossip wire.decode accepts is ~300 KB.
MAX_FIRST_FRAME = 1024 * 1024
#: Connections to the bus port that have not proved themselves yet, at most.
MAX_UNPROVEN = 64
_PREFIX = struct.Struct(Int32StringReceiver.structFormat)
_LENGTH = _PREFIX.pack  # the frame's length prefix


@implementer(IPushProducer)
class BusProtocol(BatchOutput, Int32StringReceiver):
    MAX_LENGTH = MAX_FRAME
    backlog = None  # bytes written since the transport said it is full; None: it is not
    producing = False  # registered as the transport's producer (see unregister)
    _parts = None  # the reads of a frame still incomplete (_have bytes, _need wanted)

    def __init__(self, runtime, node_id=None, on_connect=None, unproven=None):
        self.runtime = runtime
        self.node_id = node_id
        self.on_connect = on_connect
        self.peer_host = b""
        self.local_host = b""
        self.closed = False
        self.sender = None  # inbound connections: the member whose frames it carries
        self.handshake = None  # the cluster-password handshake while it runs
        self.authenticated = False  # no password, or the handshake is done
        # Inbound connections: the set of unproven connections this one is
        # in (BusServerFactory's), until it proves itself or closes (_stop_waiting).
        self.unproven = unproven
        self._deadline = None  # closes the connection if it has not proved itself by then
        if node_id is None:
            self.MAX_LENGTH = MAX_FIRST_FRAME  # until a member speaks

    def connectionMade(self):
        if hasattr(self.transport, "setTcpNoDelay"):
            self.transport.setTcpNoDelay(True)  # small frames must not wait for delayed ACKs
        self.peer_host = self.transport.getPeer().host.encode()
        self.local_host = self.transport.getHost().host.encode()
        self.transport.registerProducer(self, True)
        self.producing = True
        self.handshake = self.runtime.bus_handshake(initiator=self.node_id is not None)
        if self.handshake is None:
            if self.unproven is not None:
                self._deadline = self.runtime.reactor.callLater(auth.TIMEOUT, self._refuse,
                                                                "no bus message within %g s" % auth.TIMEOUT)
            self._authenticated()
            return
        self._max_after_handshake, self.MAX_LENGTH = self.MAX_LENGTH, auth.MAX_FRAME
        self._deadline = self.runtime.reactor.callLater(auth.TIMEOUT, self._refuse,
                                                        "no handshake within %g s" % auth.TIMEOUT)
        self._write_frame(self.handshake.hello())

    def _authenticated(self):
        self.authenticated = True
        self._link_up()

    def _link_up(self):
        """Our link is up (the runtime may send on it): once the peer is
        authenticated, and whatever a subclass waits for too."""
        if self.on_connect is not None and not self.closed:
            self.on_connect(self)

    def dataReceived(self, data):
        # Every frame of this read is handed to the core first, then the
        # effects of all of them go out together (one write per peer and
        # client instead of one per frame).
        if self._parts is not None:  # the rest of a big frame: join it once
            self._parts.append(data)
            self._have += len(data)
            if self._have < self._need:
                return
            data, self._parts = b"".join(self._parts), None
        self.runtime.bus_batch_begin()
        try:
            super().dataReceived(data)
        finally:
            self.runtime.bus_batch_end()
        rest = self._unprocessed
        if len(rest) >= _PREFIX.size and not self.closed:
            need = _PREFIX.size + _PREFIX.unpack_from(rest)[0]
            if need - len(rest) > len(data):  # more reads to come: keep them aside
                self._parts, self._have, self._need, self._unprocessed = [rest], len(rest), need, b""

    def stringReceived(self, frame):
        if self.closed:
            return
        if self.handshake is not None:
            self._handshake_frame(frame)
            return
        try:
            header, msg = wire.decode(frame)
        except wire.WireError as e:
            if auth.is_handshake_frame(frame):
                e = "it asks for a cluster-password handshake, and this node has no cluster-password"
            log.warn("Dropping bus link from {peer}: {error}", peer=self.peer_host.decode(), error=str(e))
            self.close()
            return
        if self.unproven is not None:  # its first frame: it speaks the protocol
            self._stop_waiting()
        self.runtime.bus_message(header, msg, self)
        if self.node_id is None and header.sender != self.sender and not self.closed \
                and self.runtime.bus_member(header.sender):
            self.MAX_LENGTH = MAX_FRAME
            self.sender = header.sender
            self.runtime.bus_inbound(self)

    def _handshake_frame(self, frame):
        try:
            answer = self.handshake.receive(frame)
        except auth.AuthFailed as e:
            self._refuse(str(e))
            return
        if answer is not None:
            self._write_frame(answer)
        if self.handshake.done:
            self._end_handshake()
            self._stop_waiting()
            self.MAX_LENGTH = self._max_after_handshake
            self._authenticated()

    def _stop_waiting(self):
        """The connection proved itself (the handshake is done, or without
        a password its first frame decoded), or is closing: no deadline any
        more, and it leaves the unproven ones."""
        if self._deadline is not None and self._deadline.active():
            self._deadline.cancel()
        self._deadline = None
        if self.unproven is not None:
            self.unproven.discard(self)
            self.unproven = None

    def _refuse(self, reason):
        """A failed handshake, or no proof in time: counted, logged, closed."""
        self._end_handshake()
        self._stop_waiting()
        self.runtime.bus_auth_failed(self.peer_host.decode(), reason)
        # Closed, not aborted (see close): what is written is at most our two
        # handshake frames, and the peer must get our proof to see that it
        # failed too, rather than a reset that may discard it.
        self.closed = True
        self.unregister()
        self.transport.loseConnection()

    def _end_handshake(self):
        if self.handshake is not None:
            self.handshake.release()
            self.handshake = None

    def _write_frame(self, frame):
        self.transport.write(_LENGTH(len(frame)) + frame)

    def lengthLimitExceeded(self, length):
        if self.handshake is not None:
            self._refuse("frame of %d bytes during the handshake" % length)
            return
        log.warn("Dropping bus link from {peer}: frame of {n} bytes (at most {limit})",
                 peer=self.peer_host.decode(), n=length, limit=self.MAX_LENGTH)
        self.close()

    # IPushProducer: the transport's buffer is full / has drained.  Reading
    # goes on either way (the peer's frames are not replies to ours).

    def pauseProducing(self):
        if self.backlog is None:  # called at every write while the buffer is full
            self.backlog = 0

    def resumeProducing(self):
        self.backlog = None

    def stopProducing(self):
        pass  # the connection is gone: connectionLost cleans up

    def unregister(self):
        """No longer the transport's producer: before our side closes the
        connection, or it would not close.  A transport waits for a
        registered producer before it ends: TCP for one it has paused, TLS
        (``TLSMemoryBIOProtocol``) for any, its close_notify never sent --
        a TLS link told to close (``loseConnection``) stayed open for
        good, and a node stopping waited for it forever."""
        if self.producing:
            self.producing = False
            self.transport.unregisterProducer()

    def send_frame(self, frame: bytes):
        """Keep ``frame`` for :meth:`flush`, which the runtime calls when the
        batch is done: the frames of a batch go to this peer in one write
        (:mod:`disque.io.batch_output`)."""
        if not self.closed:
            self.keep(_LENGTH(len(frame)), frame)

    def flush(self):
        data = self.take_output()
        if data is not None and not self.closed:
            write_now(self.transport, data)
            if self.backlog is not None:
                self.backlog += len(data)
                limit = self.runtime.bus_sendbuf_limit
                if limit and self.backlog > limit:
                    log.warn("Dropping bus link with {peer}: {n} bytes of frames it does not read "
                             "(cluster-link-sendbuf-limit {limit})", peer=self.peer_host.decode(),
                             n=self.backlog, limit=limit)
                    self.closed = True
                    self.transport.abortConnection()  # they would never drain

    def close(self):
        self.closed = True
        self._stop_waiting()
        # Aborted: frames waiting for a peer that speaks garbage (and may not
        # read) are not owed to it, and a transport would not close while
        # they wait.
        self.transport.abortConnection()

    def connectionLost(self, reason):
        self.closed = True
        self._end_handshake()
        self._stop_waiting()
        self._parts = None
        self.unregister()  # (and no transport <-> protocol cycle is left behind)
        if self.node_id is not None:
            self.runtime.bus_link_lost(self)
        elif self.sender is not None:
            self.runtime.bus_inbound_lost(self)


class _Closed(Protocol):
    """A connection the bus port does not take: closed as soon as made
    (what a ``buildProtocol`` returning None does, but also under TLS,
    whose wrapper needs a protocol to wrap)."""

    def connectionMade(self):
        self.transport.abortConnection()


class BusServerFactory(Factory):
    """Accepts peers' connections on the bus port; closes them at once
    while the node loads its AOF (peers see it unreachable until its
    state is back), and when ``MAX_UNPROVEN`` connections are still to
    prove themselves (counted and logged as a failed handshake).
    Invariant: ``unproven`` holds exactly the connections accepted that
    have neither proved themselves nor closed."""

    noisy = False

    def __init__(self, runtime):
        self.runtime = runtime
        self.unproven = set()

    def buildProtocol(self, addr):
        if self.runtime.loading:
            return _Closed()
        if len(self.unproven) >= MAX_UNPROVEN:
            self.runtime.bus_auth_failed(str(getattr(addr, "host", "?")), "%d bus connections are still to "
                                         "prove themselves (at most %d)" % (len(self.unproven), MAX_UNPROVEN))
            return _Closed()
        protocol = BusProtocol(self.runtime, unproven=self.unproven)
        self.unproven.add(protocol)
        return protocol
