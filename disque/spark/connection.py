"""A small blocking RESP client for the Spark connector, on ``hiredis.Reader``.

One :class:`Connection` is one socket used by one thread.  ``call`` sends a
command and returns its reply; ``pipeline`` keeps up to ``window`` commands
in flight and returns every reply in order.  Error replies come back as
:class:`ServerError` values from ``pipeline`` (so the caller can check each
one) and are raised by ``call``.

:func:`discover` turns the seed addresses of the ``nodes`` option into the
cluster's node list with HELLO.  Every failure to reach or authenticate is
raised as :class:`ConnectError` / :class:`AuthError` with one line that names
the node and the problem.
"""

import socket
from typing import Iterable, List, Optional, Sequence, Tuple

import hiredis

CONNECT_TIMEOUT_S = 5.0
IO_TIMEOUT_S = 60.0


class DisqueSparkError(Exception):
    """Base of the connector's runtime errors; ``str()`` is the whole message."""


class ServerError(DisqueSparkError):
    """An error reply (``-ERR ...``) from a node."""


class ConnectError(DisqueSparkError):
    """A node could not be reached (or dropped the connection)."""


class AuthError(DisqueSparkError):
    """Wrong or missing password."""


def _arg(a) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, str):
        return a.encode()
    if isinstance(a, int):
        return b"%d" % a
    return bytes(a)


def encode(args: Sequence) -> bytes:
    """One RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = _arg(a)
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def address(host: str, port: int) -> str:
    """The ``host:port`` spelling used in offsets and partitions."""
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def split_address(addr: str) -> Tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]"), int(port)


class Connection:
    """A blocking connection to one node (AUTH done when ``password`` is set)."""

    def __init__(self, host: str, port: int, password: Optional[str] = None,
                 timeout: float = IO_TIMEOUT_S):
        self.host, self.port = host, port
        self.addr = address(host, port)
        try:
            self.sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError as e:
            raise ConnectError("disque: cannot connect to node %s: %s" % (self.addr, e.strerror or e)) from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        self.reader = hiredis.Reader(replyError=ServerError)
        if password:
            try:
                self.call("AUTH", password)
            except ServerError as e:
                self.close()
                reason = str(e)[4:] if str(e).startswith("ERR ") else str(e)
                raise AuthError("disque: AUTH failed on node %s: %s" % (self.addr, reason)) from None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, data: bytes):
        try:
            self.sock.sendall(data)
        except OSError as e:
            raise ConnectError("disque: lost connection to node %s: %s" % (self.addr, e.strerror or e)) from None

    def _read(self):
        reader = self.reader
        while True:
            reply = reader.gets()
            if reply is not False:
                return reply
            try:
                chunk = self.sock.recv(1 << 17)
            except OSError as e:
                raise ConnectError("disque: lost connection to node %s: %s" % (self.addr, e.strerror or e)) from None
            if not chunk:
                raise ConnectError("disque: node %s closed the connection" % self.addr)
            reader.feed(chunk)

    def call(self, *args):
        """Send one command; return its reply, raise :class:`ServerError`
        for an error reply (``-NOAUTH`` becomes :class:`AuthError`)."""
        self._send(encode(args))
        reply = self._read()
        if isinstance(reply, ServerError):
            check_auth(reply, self.addr)
            raise reply
        return reply

    def pipeline(self, commands: Iterable[Sequence], window: int = 256) -> List:
        """Replies to ``commands`` in order, with at most ``window`` commands
        in flight; error replies are returned as :class:`ServerError`."""
        return list(self.stream(commands, window))

    def stream(self, commands: Iterable[Sequence], window: int = 256):
        """Like :meth:`pipeline`, but yields each reply as it arrives, and
        sends commands as ``commands`` yields them (in groups of
        ``window // 2``), so a slow producer of commands is not waited for."""
        group = max(1, window // 2)
        pending = []
        inflight = 0
        for cmd in commands:
            pending.append(encode(cmd))
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


def check_auth(reply, addr: str):
    """Raise :class:`AuthError` for a ``-NOAUTH`` reply."""
    if isinstance(reply, ServerError) and str(reply).startswith("NOAUTH"):
        raise AuthError("disque: node %s requires a password (set the 'password' option)" % addr)


def hello(conn: Connection) -> List[Tuple[str, str, int]]:
    """[(node_id, host, port), ...] from HELLO; a node that does not know
    its own host (empty) gets the address ``conn`` is connected to."""
    reply = conn.call("HELLO")
    out = []
    for entry in reply[2:]:
        node_id = entry[0].decode()
        host = entry[1].decode() or conn.host
        out.append((node_id, host, int(entry[2])))
    return out


def discover(seeds: Sequence[Tuple[str, int]], password: Optional[str]) -> List[Tuple[str, str]]:
    """The cluster's nodes as a sorted list of ``(address, node_id)``.

    Seeds are tried in order; the first that answers HELLO gives the node
    list (a node that is not a seed is found this way).  Raises
    :class:`ConnectError` naming every seed when none is reachable, and
    :class:`AuthError` on a wrong or missing password (not retried on the
    other seeds: they share the password)."""
    errors = []
    for host, port in seeds:
        try:
            with Connection(host, port, password, timeout=CONNECT_TIMEOUT_S) as conn:
                nodes = hello(conn)
        except ConnectError as e:
            errors.append(str(e).replace("disque: ", "", 1))
            continue
        found = {address(h, p): nid for nid, h, p in nodes}
        return sorted(found.items())
    raise ConnectError("disque: no reachable node among %s (%s)"
                       % (",".join(address(h, p) for h, p in seeds), "; ".join(errors)))
