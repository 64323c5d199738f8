"""One blocking connection to one node: a socket and ``hiredis.Reader``.

The transport of :class:`~disque.client.blocking.BlockingClient` and of the
Spark connector's executors.  ``call`` sends a command and returns its
reply; ``pipeline``/``stream`` keep up to ``window`` commands in flight and
give every reply in order, error replies as values (so the caller can check
each one) where ``call`` raises them.

The error classes are class attributes, so a user of the connection (the
Spark connector) can have its own raised with the same messages:
``reply_error`` for error replies, ``connect_error`` when the node cannot be
reached or drops the connection, ``auth_error`` for a missing or wrong
password (or username-password pair).  Every message is one line naming
the node.
"""

import socket
from typing import Iterable, List, Optional, Sequence, Tuple

import hiredis

from ..resp.command import encode_command
from . import errors
from .credentials import auth_args

CONNECT_TIMEOUT_S = 5.0
IO_TIMEOUT_S = 60.0


def address(host: str, port: int) -> str:
    """The ``host:port`` spelling of messages, offsets and partitions."""
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def split_address(addr: str) -> Tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


def check_auth(reply, addr: str, auth_error=errors.AuthError):
    """Raise ``auth_error`` for a ``-NOAUTH`` reply from the node at ``addr``."""
    if isinstance(reply, errors.ResponseError) and str(reply).startswith("NOAUTH"):
        raise auth_error("disque: node %s requires a password (set the 'password' option)" % addr)


class Connection:
    """A blocking connection to one node (logged in as ``username`` with
    ``password`` first, see :mod:`~disque.client.credentials`; TLS when
    ``tls`` is a :class:`~disque.client.tls.TLSOptions`)."""

    reply_error = errors.ResponseError
    connect_error = errors.ConnectionError
    auth_error = errors.AuthError

    def __init__(self, host: str, port: int, password: Optional[str] = None,
                 timeout: float = IO_TIMEOUT_S, tls=None, connect_timeout: float = CONNECT_TIMEOUT_S,
                 username: Optional[str] = None):
        self.host, self.port = host, port
        self.addr = address(host, port)
        self.username = username  # for messages
        try:
            sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as e:
            raise self.connect_error("disque: cannot connect to node %s: %s" % (self.addr, e.strerror or e)) from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:
            try:
                sock = tls.context().wrap_socket(sock, server_hostname=tls.server_name or host)
            except OSError as e:
                sock.close()
                raise self.connect_error("disque: TLS handshake with node %s failed: %s" % (self.addr, e)) from None
        sock.settimeout(timeout)
        self._timeout = timeout
        self.sock = sock
        self.reader = hiredis.Reader(replyError=self.reply_error)
        auth = auth_args(username, password)
        if auth is not None:
            try:
                self.call(*auth)
            except errors.ResponseError as e:
                self.close()
                text = str(e)
                reason = text[4:] if text.startswith("ERR ") else text
                raise self.auth_error("disque: AUTH failed on node %s: %s" % (self.addr, reason)) from None

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
            raise self.connect_error("disque: lost connection to node %s: %s" % (self.addr, e.strerror or e)) from None

    def _read(self):
        reader = self.reader
        while True:
            reply = reader.gets()
            if reply is not False:
                return reply
            try:
                chunk = self.sock.recv(1 << 17)
            except socket.timeout:
                raise self.connect_error("disque: node %s did not answer in time" % self.addr) from None
            except OSError as e:
                raise self.connect_error("disque: lost connection to node %s: %s" % (self.addr, e.strerror or e)) from None
            if not chunk:
                raise self.connect_error("disque: node %s closed the connection" % self.addr)
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

    def raise_as(self, reply: errors.ResponseError) -> Exception:
        """The exception to raise for an error reply."""
        if self.reply_error is errors.ResponseError:
            return errors.from_reply(str(reply))
        return reply

    def check_auth(self, reply):
        """Raise ``auth_error`` for a ``-NOAUTH`` reply."""
        check_auth(reply, self.addr, self.auth_error)

    def pipeline(self, commands: Iterable[Sequence], window: int = 256) -> List:
        """Replies to ``commands`` in order, with at most ``window`` commands
        in flight; error replies are returned as ``reply_error`` values."""
        return list(self.stream(commands, window))

    def stream(self, commands: Iterable[Sequence], window: int = 256):
        """Like :meth:`pipeline`, but yields each reply as it arrives, and
        sends commands as ``commands`` yields them (in groups of
        ``window // 2``), so a slow producer of commands is not waited for."""
        group = max(1, window // 2)
        pending = []
        inflight = 0
        for cmd in commands:
            pending.append(encode_command(cmd))
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
