"""The Twisted client's connections: one txredisapi connection
(:class:`Conn`), the connections to one node (:class:`Node`), and how a
connection is opened (:func:`new_factory`, :func:`dial`: endpoint, TLS,
AUTH, timeouts).  Which node to use and failing over is
:class:`~disque.client.txclient.DisqueClient`'s.

Invariants: a connection is usable while :attr:`Conn.alive`; a node's
``shared`` connection carries the pipelined calls, its ``idle`` ones the
blocking calls, one at a time; a retired node takes no new call and is
closed once its calls in flight are answered (``busy`` false).
"""

from typing import List, Optional

import txredisapi
from twisted.internet import defer
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS

from . import errors
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


def response_error(e: Exception) -> errors.ResponseError:
    """The client's exception for a txredisapi error reply."""
    line = e.args[0] if e.args else ""
    return errors.from_reply(line)


def new_factory(node: Node, username: Optional[str], password: Optional[str]) -> txredisapi.RedisFactory:
    """The txredisapi factory of one connection to ``node``: its protocol
    sends AUTH first (:mod:`.credentials`)."""
    username, password = login(username, password)
    factory = txredisapi.RedisFactory("%s:%d" % node.address, None, 1, isLazy=False, charset=None,
                                      password=password, convertNumbers=False, username=username)
    factory.reconnect = False
    return factory


@defer.inlineCallbacks
def dial(reactor, factory: txredisapi.RedisFactory, node: Node, tls, connect_timeout: float, reply_timeout: float):
    """Connect ``factory`` to ``node`` (through TLS when ``tls`` is a
    :class:`~disque.client.tls.TLSOptions`); fires with the :class:`Conn`
    once it is ready (a refused AUTH raises :class:`AuthError`)."""
    endpoint = HostnameEndpoint(reactor, node.host, node.port, timeout=connect_timeout)
    if tls is not None:
        endpoint = wrapClientTLS(tls.creator(node.host), endpoint)
    factory.startConnecting(endpoint)
    d = factory.deferred
    d.addTimeout(connect_timeout + reply_timeout, reactor)
    try:
        yield d
    except ValueError as e:  # txredisapi's "Redis error: could not ..."
        factory.disconnect().addErrback(lambda f: None)
        message = str(e)
        if "could not auth" in message:
            raise errors.AuthError("AUTH failed on %s:%d: %s"
                                   % (node.host, node.port, message.split(": ", 2)[-1]))
        raise errors.ConnectionError("%s:%d: %s" % (node.host, node.port, message.split(": ", 1)[-1]))
    except Exception:
        factory.disconnect().addErrback(lambda f: None)
        raise
    return Conn(factory)
