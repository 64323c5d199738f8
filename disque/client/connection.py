"""One blocking connection to one node: a socket and ``hiredis.Reader``.

The transport of :class:`~disque.client.blocking.BlockingClient` and of the
Spark connector's executors.  ``call`` sends a command and returns its
reply; ``pipeline``/``stream`` keep up to ``window`` commands in flight and
give every reply in order, error replies as values (so the caller can check
each one) where ``call`` raises them.

The error classes are class attributes, so a user of the connection (the
Spark connector) can have its own raised with the same messages (after
its ``prefix``): ``reply_error`` for error replies, ``connect_error`` when
the node cannot be reached or drops the connection, ``protocol_error``
when it does not speak RESP or is no Disque node, ``tls_error`` when TLS
cannot connect to it, ``auth_error`` for a missing or wrong password (or
username-password pair).  Every message is one line naming the node, in
the words of :mod:`.causes` (the Twisted client's too).
"""

import socket
import ssl
from typing import Iterable, List, Optional, Sequence, Tuple

import hiredis

from ..resp.command import encode_command
from . import causes, errors
from .credentials import auth_args

CONNECT_TIMEOUT_S = 5.0
IO_TIMEOUT_S = 60.0


address = errors.node_address  # the host:port spelling of messages, offsets and partitions


def split_address(addr: str) -> Tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def check_auth(reply, addr: str, auth_error=errors.AuthError, prefix: str = ""):
    """Raise ``auth_error`` for a ``-NOAUTH`` reply from the node at ``addr``."""
    if isinstance(reply, errors.ResponseError) and str(reply).startswith("NOAUTH"):
        raise as_class(causes.password_required(addr, str(reply)), auth_error, prefix)


def as_class(error: Exception, cls, prefix: str = "") -> Exception:
    """``error`` as an instance of ``cls`` (a subclass of its class: the
    Spark connector's), its message after ``prefix``, its attributes kept."""
    if type(error) is cls and not prefix:
        return error
    own = cls(prefix + str(error))
    own.__dict__.update(error.__dict__)
    return own


def _socket_error(addr: str, e: OSError, timeout: Optional[float]) -> errors.ConnectionError:
    """The error for a socket's failure to connect."""
    if isinstance(e, ConnectionRefusedError):
        return causes.refused(addr)
    if isinstance(e, socket.timeout):
        return causes.no_connection(addr, timeout)
    return causes.unreachable(addr, e.strerror or str(e))


def probe(host: str, port: int, data: bytes, timeout: float) -> bytes:
    """The first bytes the node at ``host:port`` answers to ``data`` on a
    new connection (``b""``: none within ``timeout``; :mod:`.causes`)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(data)
            return sock.recv(16)
    except OSError:
        return b""


class Connection:
    """A blocking connection to one node (logged in as ``username`` with
    ``password`` first, see :mod:`~disque.client.credentials`; TLS when
    ``tls`` is a :class:`~disque.client.tls.TLSOptions`)."""

    reply_error = errors.ResponseError
    connect_error = errors.ConnectionError
    protocol_error = errors.ProtocolMismatch
    tls_error = errors.TLSError
    auth_error = errors.AuthError
    prefix = ""  # of every message

    def __init__(self, host: str, port: int, password: Optional[str] = None,
                 timeout: float = IO_TIMEOUT_S, tls=None, connect_timeout: float = CONNECT_TIMEOUT_S,
                 username: Optional[str] = None):
        self.host, self.port = host, port
        self.addr = address(host, port)
        self.username = username  # for messages
        self._tls, self._connect_timeout = tls is not None, connect_timeout
        self._answered = False  # a byte came from the node
        self.silent = False  # the node closed the connection without a byte
        self._chunk = b""  # the last bytes read (quoted when they are not RESP)
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise self._own(_socket_error(self.addr, e, connect_timeout)) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls.context().wrap_socket(sock, server_hostname=tls.server_name or host)
            except OSError as e:
                sock.close()
                raise self._own(self._handshake_error(e)) from None
        sock.settimeout(timeout)
        self._timeout = timeout
        self.sock = sock
        self.reader = hiredis.Reader(replyError=self.reply_error)
        auth = auth_args(username, password)
        if auth is not None:
            try:
                self.opening_call(*auth)
            except errors.ResponseError as e:
                self.close()
                raise self._own(causes.auth_failed(self.addr, str(e))) from None
            except errors.ConnectionError:
                self.close()
                raise

    def _handshake_error(self, e: OSError) -> Exception:
        if isinstance(e, ssl.SSLCertVerificationError):
            return causes.tls_failed(self.addr, causes.ssl_words(e))
        if isinstance(e, ssl.SSLError) and not isinstance(e, ssl.SSLEOFError):
            error = causes.tls_failed(self.addr, causes.ssl_words(e), maybe_plain=True)
        elif isinstance(e, socket.timeout):
            error = causes.no_handshake(self.addr, self._connect_timeout)
        else:  # the node closed or reset the connection
            error = causes.tls_closed(self.addr)
        return self._diagnose(error)

    def _diagnose(self, error: Exception) -> Exception:
        """``error``, or the cause a probe of the node shows (:mod:`.causes`)."""
        data = causes.probe_for(error, self._tls)
        if data is None:
            return error
        return causes.diagnosed(error, probe(self.host, self.port, data, self._connect_timeout))

    def _own(self, error: Exception) -> Exception:
        """A cause of :mod:`.causes` as this connection's class for it."""
        for kind, cls in ((errors.TLSError, self.tls_error), (errors.ProtocolMismatch, self.protocol_error),
                          (errors.AuthError, self.auth_error), (errors.ConnectionError, self.connect_error)):
            if isinstance(error, kind):
                return as_class(error, cls, self.prefix)
        return error

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def settimeout(self, seconds: Optional[float]):
        if seconds != self._timeout:
            self._timeout = seconds
            self.sock.settimeout(seconds)

    def _send(self, data: bytes):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise self._own(self._lost(e)) from None

    def _lost(self, e: OSError) -> Exception:
        if isinstance(e, ssl.SSLError) and not isinstance(e, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
            # an alert: the node refused the client's certificate (or its lack of one)
            return causes.tls_failed(self.addr, causes.ssl_words(e))
        if not self._answered and isinstance(e, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError)):
            self.silent = True
        return causes.lost(self.addr, e.strerror or str(e))

    def _read(self):
        reader = self.reader
        while True:
            try:
                reply = reader.gets()
            except hiredis.ProtocolError:
                self.close()
                raise self._own(causes.not_resp(self.addr, self._chunk)) from None
            if reply is not False:
                return reply
            try:
                chunk = self.sock.recv(1 << 17)
            except socket.timeout:
                raise self._own(causes.no_reply(self.addr, self._timeout)) from None
            except OSError as e:
                raise self._own(self._lost(e)) from None
            if not chunk:
                self.silent = not self._answered
                raise self._own(causes.lost(self.addr, "the node closed it"))
            self._answered, self._chunk = True, chunk
            reader.feed(chunk)

    def call(self, *args):
        """Send one command; return its reply.  An error reply is raised as
        the class of its code (:func:`~disque.client.errors.from_reply`; a
        ``-NOAUTH`` as ``auth_error``)."""
        self._send(encode_command(args))
        reply = self._read()
        if isinstance(reply, errors.ResponseError):
            self.check_auth(reply)
            raise self.raise_as(reply)
        return reply

    def opening_call(self, *args):
        """:meth:`call` as a new connection's first exchange (AUTH, HELLO):
        a node that closes the connection without a byte does not speak
        RESP, or serves TLS (:func:`~.causes.closed_silently`)."""
        try:
            return self.call(*args)
        except errors.ConnectionError:
            if not self.silent:
                raise
        self.close()
        raise self._own(self._diagnose(causes.closed_silently(self.addr)))

    def raise_as(self, reply: errors.ResponseError) -> Exception:
        """The exception to raise for an error reply."""
        if self.reply_error is errors.ResponseError:
            return errors.from_reply(str(reply))
        return reply

    def check_auth(self, reply):
        """Raise ``auth_error`` for a ``-NOAUTH`` reply."""
        check_auth(reply, self.addr, self.auth_error, self.prefix)

    def pipeline(self, commands: Iterable[Sequence], window: int = 256) -> List:
        """Replies to ``commands`` in order, with at most ``window`` commands
        in flight; error replies are returned as ``reply_error`` values."""
        return list(self.stream(commands, window))

    def stream(self, commands: Iterable[Sequence], window: int = 256):
        """Like :meth:`pipeline`, but yields each reply as it arrives, and
        sends commands as ``commands`` yields them (in groups of
        ``window // 2``), so a slow producer of commands is not waited for."""
        return self.stream_requests((encode_command(cmd) for cmd in commands), window)

    def stream_requests(self, requests: Iterable[bytes], window: int = 256):
        """:meth:`stream` for requests encoded already (the RESP bytes of
        each): sent ``window // 2`` per write with at most ``window`` in
        flight; yields each reply in request order as it arrives."""
        group = max(1, window // 2)
        pending = []
        inflight = 0
        for request in requests:
            pending.append(request)
            if len(pending) >= group:
                while inflight + len(pending) > window:
                    yield self._read()
                    inflight -= 1
                self._send(b"".join(pending))
                inflight += len(pending)
                pending = []
        if pending:
            self._send(b"".join(pending))
            inflight += len(pending)
        for _ in range(inflight):
            yield self._read()
