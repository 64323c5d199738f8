"""RESP2 reply encoding.  Replies are built as ``bytes`` end to end.

Handlers return already encoded replies, so a pipeline of N commands becomes
N byte strings joined once and written once.  What a handler may return
besides an encoded reply (BLOCKED, a ReplySlot) and the CLIENT REPLY
modes are the handler/protocol contract: :mod:`disque.contract`.
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

