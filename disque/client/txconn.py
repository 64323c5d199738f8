"""The Twisted client's connections: one txredisapi connection
(:class:`Conn`), the connections to one node (:class:`Node`), and how a
connection is opened (:func:`new_factory`, :func:`dial`: endpoint, TLS,
AUTH, timeouts).  Which node to use and failing over is
:class:`~disque.client.txclient.DisqueClient`'s.

Invariants: a connection is usable while :attr:`Conn.alive`; a node's
``shared`` connection carries the pipelined calls, its ``idle`` ones the
blocking calls, one at a time; a retired node takes no new call and is
closed once its calls in flight are answered (``busy`` false).

Why a connection failed is told by its protocol (:class:`Protocol`):
its calls fail with :class:`Lost`, which carries the client's error for
the cause, in the words of :mod:`.causes` (the blocking client's too);
:func:`cause_of` gives that error for whatever a call failed with, and
:func:`diagnose` probes the node when the cause needs it.
"""

from typing import List, Optional

import txredisapi
from twisted.internet import defer, error as net_error, protocol
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.interfaces import IHandshakeListener, IStreamClientEndpoint
from zope.interface import implementer

from . import causes, errors
from .credentials import login
from .nodes import Address


class Conn:
    """One txredisapi connection (a RedisFactory with one pooled protocol).

    ``pending`` counts the calls of the fast path sent on it and not yet
    answered, ``progress`` is when it last answered one (or when it went
    from idle to busy): the client's watchdog closes a connection that has
    calls pending and no progress for ``reply_timeout`` seconds."""

    __slots__ = ("factory", "handler", "pending", "progress")

    def __init__(self, factory):
        self.factory = factory
        self.handler = factory.handler
        self.pending = 0
        self.progress = 0.0

    @property
    def alive(self) -> bool:
        return self.factory.size > 0 and not self.factory.disconnectCalled

    def execute(self, args):
        return self.handler.execute_command(*args)

    def close(self):
        if not self.factory.disconnectCalled:
            self.factory.disconnect().addErrback(lambda f: None)


class Node:
    """The client's connections to one node."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.addr = errors.node_address(host, port)  # host:port, for messages
        self.id: Optional[str] = None
        self.shared: Optional[Conn] = None   # the pipelined connection
        self.opening: Optional[List[defer.Deferred]] = None  # waiters while the shared one opens
        self.idle: List[Conn] = []           # connections for blocking calls
        self.inflight = 0
        self.retired = False

    @property
    def address(self) -> Address:
        return self.host, self.port

    @property
    def busy(self) -> bool:
        """Calls of either path are waiting for a reply here."""
        return self.inflight > 0 or (self.shared is not None and self.shared.pending > 0)

    def conns(self) -> List[Conn]:
        return ([self.shared] if self.shared else []) + self.idle

    def close(self):
        for conn in self.conns():
            conn.close()
        self.shared, self.idle = None, []

    def __repr__(self):
        return "<node %s:%d %s>" % (self.host, self.port, (self.id or "?")[:8])

    def __str__(self):
        """As the log lines name it: ``127.0.0.1:7711 (3f2a9c1b)``."""
        return "%s:%d" % (self.host, self.port) + (" (%s)" % self.id[:8] if self.id else "")


def response_error(e: Exception, address: Optional[str] = None) -> errors.ResponseError:
    """The client's exception for a txredisapi error reply (from the node
    at ``address``: a ``-NOAUTH`` names it)."""
    line = e.args[0] if e.args else ""
    error = errors.from_reply(line)
    if address is not None and error.code == "NOAUTH":
        return causes.password_required(address, str(error))
    return error


class Lost(txredisapi.ConnectionError):
    """txredisapi's lost connection, with the client's error for its cause
    (``error``, from :mod:`.causes`)."""

    def __init__(self, error: errors.ConnectionError):
        super().__init__(str(error))
        self.error = error


def cause_of(address: str, e) -> Exception:
    """The client's error for what a call to the node at ``address``
    failed with (an exception or a Failure)."""
    e = getattr(e, "value", e)
    if isinstance(e, Lost):
        return e.error
    if isinstance(e, errors.DisqueError):
        return e
    if isinstance(e, defer.TimeoutError):
        seconds = e.args[0] if e.args and isinstance(e.args[0], (int, float)) else None
        return causes.no_reply(address, seconds)
    if isinstance(e, txredisapi.ConnectionError) and str(e) in ("Lost connection", "Not connected"):
        return causes.lost(address)
    return errors.ConnectionError.at(address, str(e) or type(e).__name__)


def _tls_words(e: Exception) -> Optional[str]:
    """OpenSSL's words for a TLS failure (pyOpenSSL's error, or the
    certificate's name check), ``None`` for another exception."""
    module = type(e).__module__
    if module.startswith("OpenSSL"):
        reasons = [entry[-1] for entry in (e.args[0] if e.args and isinstance(e.args[0], list) else ())
                   if isinstance(entry, tuple) and entry and entry[-1]]
        return "; ".join(reasons) or str(e) or type(e).__name__
    if module.startswith("service_identity"):  # a certificate of the CA, for other names
        wanted = [getattr(m, "mismatched_id", None) for m in getattr(e, "errors", ())]
        names = [getattr(i, "hostname", None) or getattr(i, "ip", None) for i in wanted]
        shown = ", ".join(repr(n.decode() if isinstance(n, bytes) else str(n)) for n in names if n)
        return "certificate verify failed: the certificate is not valid for %s" % (shown or "this host")
    return None


@implementer(IHandshakeListener)
class Protocol(txredisapi.HiredisProtocol):
    """txredisapi's protocol, telling why its connection failed.

    Bytes that are not RESP fail the calls waiting and close the
    connection (txredisapi would raise out of ``dataReceived``, which
    Twisted logs as an unhandled error and answers by a bare lost
    connection).  A lost connection fails its calls with :class:`Lost`
    naming the cause (``cause``): TLS refused, or lost (``silent`` when the
    node closed it without a byte: :func:`unanswered`).  Over TLS, no
    handshake within the factory's ``handshake_timeout`` closes the
    connection; :meth:`whenHandshakeDone` waits for it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cause: Optional[Exception] = None
        self.refusal: Optional[Exception] = None  # the node's answer to a refused AUTH
        self.answered = False  # a byte came from the node
        self.silent = False  # the node closed the connection without a byte
        self.handshake_done = False
        self._handshake_waiters: List[defer.Deferred] = []
        self._timer = None

    def connectionMade(self):
        timeout = self.factory.handshake_timeout
        if timeout is not None:
            self._timer = self.factory.reactor.callLater(timeout, self._no_handshake, timeout)
        return super().connectionMade()

    def auth(self, password, username=None):
        return super().auth(password, username).addErrback(self._auth_refused)

    def _auth_refused(self, failure):
        if failure.check(txredisapi.ResponseError):
            self.refusal = failure.value
        return failure

    def handshakeCompleted(self):
        self.handshake_done = True
        self._stop_timer()
        waiters, self._handshake_waiters = self._handshake_waiters, []
        for d in waiters:
            d.callback(self)

    def whenHandshakeDone(self) -> defer.Deferred:
        """Fires once the TLS handshake is done; fails with :class:`Lost`
        if the connection is lost first."""
        if self.handshake_done:
            return defer.succeed(self)
        if self.cause is not None:
            return defer.fail(Lost(self.cause))
        d = defer.Deferred()
        self._handshake_waiters.append(d)
        return d

    def dataReceived(self, data, unpause=False):
        if self.cause is not None:
            return None
        self.answered = True
        try:
            return super().dataReceived(data, unpause)
        except txredisapi.InvalidData:  # hiredis: not RESP
            self._fail(causes.not_resp(self.factory.address, data))
        return None

    def _no_handshake(self, timeout: float):
        self._timer = None
        if not self.handshake_done and self.cause is None:
            self._fail(causes.no_handshake(self.factory.address, timeout))

    def _fail(self, cause: Exception):
        self.cause = cause
        self._fail_waiting()
        self.transport.abortConnection()

    def _fail_waiting(self):
        while self.replyQueue.waiting:
            self.replyReceived(Lost(self.cause))

    def _stop_timer(self):
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def connectionLost(self, why):
        self._stop_timer()
        if self.cause is None:
            self.cause = self._loss(why.value)
        self._fail_waiting()
        waiters, self._handshake_waiters = self._handshake_waiters, []
        for d in waiters:
            d.errback(Lost(self.cause))
        super().connectionLost(why)
        if self.factory.deferred:  # lost before it was ready: dial learns it now
            self.factory.connectionError("Redis error: %s" % self.cause)

    def _loss(self, e: Exception) -> Exception:
        address = self.factory.address
        words = _tls_words(e)
        if words is not None:
            maybe_plain = not self.handshake_done and "certificate" not in words
            return causes.tls_failed(address, words, maybe_plain)
        if self.factory.disconnectCalled:
            return causes.lost(address, "closed by the client")
        self.silent = not self.answered
        return causes.lost(address)


def unanswered(factory: "Factory", error: Exception) -> Exception:
    """``error``, the cause of a new connection's first exchange failing
    (AUTH, HELLO), or the cause of its own when the node closed the
    connection without a byte (:func:`~.causes.closed_silently`; over TLS
    before the handshake was done, :func:`~.causes.tls_closed`)."""
    proto = getattr(factory, "last", None)
    if proto is None or not proto.silent:
        return error
    if factory.handshake_timeout is not None and not proto.handshake_done:
        return causes.tls_closed(factory.address)
    return causes.closed_silently(factory.address)


class Factory(txredisapi.RedisFactory):
    """txredisapi's factory with :class:`Protocol`: ``last`` is the
    protocol of its connection, ``address`` the node's ``host:port``."""

    protocol = Protocol
    address = ""
    reactor = None
    handshake_timeout: Optional[float] = None  # TLS: the time the handshake may take
    last: Optional[Protocol] = None

    def buildProtocol(self, addr):
        self.last = super().buildProtocol(addr)
        return self.last


@implementer(IStreamClientEndpoint)
class _Recording:
    """An endpoint that keeps why its connection attempt failed."""

    failure = None

    def __init__(self, endpoint):
        self.endpoint = endpoint

    def connect(self, factory):
        return self.endpoint.connect(factory).addErrback(self._record)

    def _record(self, failure):
        self.failure = failure
        return failure


def new_factory(node: Node, username: Optional[str], password: Optional[str]) -> Factory:
    """The txredisapi factory of one connection to ``node``: its protocol
    sends AUTH first (:mod:`.credentials`)."""
    username, password = login(username, password)
    factory = Factory("%s:%d" % node.address, None, 1, isLazy=False, charset=None,
                      password=password, convertNumbers=False, username=username)
    factory.reconnect = False
    factory.address = node.addr
    return factory


@defer.inlineCallbacks
def dial(reactor, factory: Factory, node: Node, tls, connect_timeout: float, reply_timeout: float):
    """Connect ``factory`` to ``node`` (through TLS when ``tls`` is a
    :class:`~disque.client.tls.TLSOptions`); fires with the :class:`Conn`
    once it is ready, or fails with the cause (a refused AUTH raises
    :class:`AuthError`; :mod:`.causes`)."""
    endpoint = HostnameEndpoint(reactor, node.host, node.port, timeout=connect_timeout)
    if tls is not None:
        endpoint = wrapClientTLS(tls.creator(node.host), endpoint)
        factory.handshake_timeout = connect_timeout
    factory.reactor = reactor
    endpoint = _Recording(endpoint)
    factory.startConnecting(endpoint)
    d = factory.deferred
    d.addTimeout(connect_timeout + reply_timeout, reactor)
    try:
        yield d
        if tls is not None:
            yield factory.last.whenHandshakeDone()
    except Exception as e:
        factory.deferred = None  # fired or given up: a later loss must not fire it again
        factory.disconnect().addErrback(lambda f: None)
        error = yield diagnose(reactor, node, tls is not None, connect_timeout,
                               _dial_error(factory, endpoint, e, connect_timeout))
        raise error
    return Conn(factory)


def _dial_error(factory: Factory, endpoint: _Recording, e: Exception, connect_timeout: float) -> Exception:
    address, proto = factory.address, factory.last
    if proto is not None and proto.refusal is not None:
        return causes.auth_failed(address, str(proto.refusal))
    if proto is not None and proto.cause is not None:
        return unanswered(factory, proto.cause)
    if endpoint.failure is not None:
        failed = endpoint.failure.value
        if isinstance(failed, net_error.ConnectionRefusedError):
            return causes.refused(address)
        if isinstance(failed, (net_error.TimeoutError, defer.TimeoutError)):
            return causes.no_connection(address, connect_timeout)
        return causes.unreachable(address, endpoint.failure.getErrorMessage())
    return cause_of(address, e)


@defer.inlineCallbacks
def diagnose(reactor, node: Node, tls: bool, timeout: float, error: Exception):
    """``error``, or the cause a probe of ``node`` shows (:mod:`.causes`)."""
    data = causes.probe_for(error, tls)
    if data is None:
        return error
    answer = yield probe(reactor, node.host, node.port, data, timeout)
    return causes.diagnosed(error, answer)


class _Probe(protocol.Protocol):
    def __init__(self, data: bytes):
        self.data = data
        self.answer = b""
        self.done = defer.Deferred()

    def connectionMade(self):
        self.transport.write(self.data)

    def dataReceived(self, data):
        self.answer += data
        if len(self.answer) >= 2:
            self.transport.abortConnection()

    def connectionLost(self, reason):
        self.finish()

    def finish(self, _=None):
        if not self.done.called:
            self.done.callback(self.answer)


def probe(reactor, host: str, port: int, data: bytes, timeout: float) -> defer.Deferred:
    """Fires with the first bytes the node at ``host:port`` answers to
    ``data`` on a new connection (``b""``: none within ``timeout``)."""
    p = _Probe(data)
    factory = protocol.Factory.forProtocol(lambda: p)
    factory.noisy = False
    connecting = HostnameEndpoint(reactor, host, port, timeout=timeout).connect(factory)
    connecting.addErrback(p.finish)

    def give_up():
        if p.transport is not None:
            p.transport.abortConnection()
        else:
            connecting.cancel()
        p.finish()

    timer = reactor.callLater(timeout, give_up)
    return p.done.addBoth(lambda answer: (timer.cancel() if timer.active() else None, answer)[1])
