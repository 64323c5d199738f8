"""RESP2 reply encoding.  Replies are built as ``bytes`` end to end.

Handlers return already encoded replies, so a pipeline of N commands becomes
N byte strings joined once and written once.
"""

OK = b"+OK\r\n"
PONG = b"+PONG\r\n"
NULL_BULK = b"$-1\r\n"
NULL_ARRAY = b"*-1\r\n"
EMPTY_ARRAY = b"*0\r\n"
ZERO = b":0\r\n"
ONE = b":1\r\n"
SYNTAX_ERROR = b"-ERR syntax error\r\n"
NOT_INTEGER = b"-ERR value is not an integer or out of range\r\n"

_small_ints = [b":%d\r\n" % i for i in range(1024)]


def integer(n: int) -> bytes:
    if 0 <= n < 1024:
        return _small_ints[n]
    return b":%d\r\n" % n


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def bulk_or_null(data) -> bytes:
    return NULL_BULK if data is None else b"$%d\r\n%s\r\n" % (len(data), data)


def status(text: bytes) -> bytes:
    return b"+" + text + b"\r\n"


def one_line(text: bytes) -> bytes:
    """``text`` with CR and LF as spaces: an error or status line that
    quotes a client's argument must stay one line, or the reply stream
    breaks (Redis >= 4 does the same in ``addReplyErrorLength``)."""
    return text.replace(b"\r", b" ").replace(b"\n", b" ")


def error(text: bytes) -> bytes:
    """``text`` includes the code, e.g. b"ERR syntax error"."""
    return b"-" + one_line(text) + b"\r\n"


def err(message: bytes) -> bytes:
    return b"-ERR " + one_line(message) + b"\r\n"


def array(items) -> bytes:
    """``items`` are already-encoded replies."""
    items = list(items)
    return b"*%d\r\n" % len(items) + b"".join(items)


def bulk_array(values) -> bytes:
    values = list(values)
    parts = [b"*%d\r\n" % len(values)]
    for v in values:
        parts.append(b"$%d\r\n%s\r\n" % (len(v), v))
    return b"".join(parts)


# -- What a command handler may return besides an encoded reply ---------------

BLOCKED = object()
"""The handler parked its client (GETJOB with no job): the reply comes
later through ``deliver``, and the requests pipelined behind it wait."""


class ReplySlot:
    """A reply to come, in its place in the connection's output order,
    that does not hold up the requests behind it (ADDJOB waiting for its
    copies: pipelined ADDJOBs replicate concurrently, replies stay in
    order).

    The core fills it through a ``Reply(slot, payload)`` effect: the
    adapter calls ``slot.conn.deliver(payload)``, so the slot is its own
    ``conn``."""

    __slots__ = ("proto", "payload")

    def __init__(self, proto):
        self.proto = proto
        self.payload = None

    @property
    def conn(self):
        return self

    def deliver(self, payload):
        if self.payload is None:
            self.payload = payload
            self.proto.slot_filled()


# CLIENT REPLY modes: whether the protocol writes a command's reply.
REPLY_ON = 0
REPLY_OFF = 1
REPLY_SKIP = 2  # skip the reply of this command, then back to ON
REPLY_SKIP_NEXT = 3  # set by CLIENT REPLY SKIP: skip the *next* command
