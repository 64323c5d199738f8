"""IOSimClient: a RESP client for in-memory nodes (:class:`IOSimCluster`)
and its reply reader (commands are written by
:func:`disque.resp.command.encode_command`); an error reply is a value
(:class:`ErrorReply`), not an exception.
"""

from collections import deque

from twisted.internet.protocol import Protocol

from ..resp.command import encode_command


class ErrorReply:
    """An error reply (``-...``) as :class:`IOSimClient` returns it: a value,
    not an exception, so that a test compares it like any other reply."""

    __slots__ = ("message",)

    def __init__(self, message: bytes):
        self.message = message  # without the leading "-" and the CRLF

    def __eq__(self, other):
        return isinstance(other, ErrorReply) and other.message == self.message

    def __hash__(self):
        return hash(self.message)

    def __repr__(self):
        return "ErrorReply(%r)" % (self.message,)


def _read_reply(buf: bytes, pos: int):
    """``(value, end)`` of the RESP reply at ``pos``, None if incomplete:
    status -> bytes, error -> ErrorReply, integer -> int, bulk -> bytes or
    None, array -> list or None."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        return None
    kind, line, end = buf[pos:pos + 1], buf[pos + 1:eol], eol + 2
    if kind == b"+":
        return line, end
    if kind == b"-":
        return ErrorReply(line), end
    if kind == b":":
        return int(line), end
    n = int(line)
    if kind == b"$":
        if n < 0:
            return None, end
        if len(buf) < end + n + 2:
            return None
        return buf[end:end + n], end + n + 2
    if kind == b"*":
        if n < 0:
            return None, end
        items = []
        for _ in range(n):
            item = _read_reply(buf, end)
            if item is None:
                return None
            value, end = item
            items.append(value)
        return items, end
    raise ValueError("not a RESP reply: %r" % buf[pos:pos + 20])


class IOSimClient(Protocol):
    """A RESP client of one node of an :class:`IOSimCluster`.

    ``send`` writes a command; the reply arrives when the cluster is pumped
    (``cluster.pump()``, ``cluster.advance(...)``), in order, into
    ``replies``.  ``call`` is send, pump, take the reply: for commands that
    answer at once.  A command that blocks (GETJOB, ADDJOB waiting for its
    replicas) is ``send`` now and ``reply()`` later."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.buffer = b""
        self.replies = deque()  # parsed replies not yet taken
        self.raw = []  # the bytes of every reply received, in order
        self.closed = False

    def dataReceived(self, data):
        self.buffer += data
        while self.buffer:
            item = _read_reply(self.buffer, 0)
            if item is None:
                return
            value, end = item
            self.raw.append(self.buffer[:end])
            self.replies.append(value)
            self.buffer = self.buffer[end:]

    def connectionLost(self, reason=None):
        self.closed = True

    def send(self, *args):
        """Write one command (arguments as str, bytes or int)."""
        self.transport.write(encode_command(args))

    def reply(self):
        """The oldest reply not taken yet; AssertionError if none came."""
        if not self.replies:
            raise AssertionError("no reply (yet)")
        return self.replies.popleft()

    def call(self, *args):
        """Send, pump, and return the reply (for commands that answer at once)."""
        self.send(*args)
        self.cluster.pump()
        return self.reply()
