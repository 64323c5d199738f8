"""Typed RESP values for comparing replies: ``("+", bytes)``, ``("-", bytes)``,
``(":", int)``, ``("$", bytes | None)``, ``("*", list | None)``.

Unlike hiredis this keeps status apart from bulk, and :func:`encode` gives
back the exact bytes of a canonical reply (the transcripts' replies are all
canonical: ``test_golden_transcripts`` checks it), so that comparing values
loses nothing the bytes would show.  Also here: splitting raw request bytes
into commands, and the field accessors of ``field value field value ...``
arrays (SHOW records, QSTAT).  Requests are written by the node's one
command encoder, :func:`disque.resp.command.encode_command`, re-exported
here for the replayer.
"""

from disque.resp.command import encode_command

__all__ = ["Incomplete", "encode", "encode_command", "field", "fields", "ids", "is_record", "parse_replies", "parse_reply",
           "set_field", "split_requests"]


class Incomplete(Exception):
    pass


def parse_reply(buf: bytes, pos: int = 0):
    """One reply at ``pos``: ``(value, end)``; raises Incomplete or
    ValueError (malformed)."""
    eol = buf.find(b"\r\n", pos)
    if eol < 0:
        raise Incomplete()
    kind = buf[pos:pos + 1]
    line = buf[pos + 1:eol]
    end = eol + 2
    if kind in (b"+", b"-"):
        return (kind.decode(), line), end
    if kind == b":":
        return (":", int(line)), end
    if kind == b"$":
        n = int(line)
        if n < 0:
            return ("$", None), end
        if len(buf) < end + n + 2:
            raise Incomplete()
        if buf[end + n:end + n + 2] != b"\r\n":
            raise ValueError("bulk not followed by CRLF")
        return ("$", buf[end:end + n]), end + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return ("*", None), end
        items = []
        for _ in range(n):
            item, end = parse_reply(buf, end)
            items.append(item)
        return ("*", items), end
    raise ValueError("bad RESP type byte %r" % kind)


def parse_replies(buf: bytes) -> list:
    """Every complete reply in ``buf`` (raises ValueError on leftovers)."""
    out = []
    pos = 0
    while pos < len(buf):
        try:
            value, pos = parse_reply(buf, pos)
        except Incomplete:
            raise ValueError("incomplete reply at byte %d" % pos)
        out.append(value)
    return out


def encode(value) -> bytes:
    kind, v = value
    if kind in ("+", "-"):
        return kind.encode() + v + b"\r\n"
    if kind == ":":
        return b":%d\r\n" % v
    if kind == "$":
        return b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v)
    if kind == "*":
        if v is None:
            return b"*-1\r\n"
        return b"*%d\r\n" % len(v) + b"".join(encode(x) for x in v)
    raise ValueError(kind)


def split_requests(data: bytes) -> list:
    """Best-effort split of raw request bytes into argv lists (RESP arrays
    and inline commands, as the server reads them); used to know which
    command each pipelined reply answers.  Empty requests are dropped."""
    out = []
    try:
        _split(data, out)
    except ValueError:  # a protocol error: the server stops there too
        pass
    return out


def _split(data, out):
    pos = 0
    while pos < len(data):
        if data[pos:pos + 1] == b"*":
            eol = data.find(b"\r\n", pos)
            if eol < 0:
                break
            n = int(data[pos + 1:eol])
            pos = eol + 2
            argv = []
            for _ in range(max(n, 0)):
                eol = data.find(b"\r\n", pos)
                ln = int(data[pos + 1:eol])
                argv.append(data[eol + 2:eol + 2 + ln])
                pos = eol + 2 + ln + 2
            if argv:
                out.append(argv)
        else:
            eol = data.find(b"\n", pos)
            if eol < 0:
                break
            words = data[pos:eol].rstrip(b"\r").split()
            if words:
                out.append(words)
            pos = eol + 1


# -- field / value arrays (SHOW, JSCAN REPLY all records, QSTAT) -------------

def fields(v):
    """[(name, value)] of a ``name value name value ...`` array."""
    items = v[1]
    return [(items[i][1], items[i + 1]) for i in range(0, len(items) - 1, 2)]


def field(record, key):
    return dict(fields(record)).get(key)


def set_field(record, key, value):
    """A copy of a SHOW record value with one field replaced."""
    items = list(record[1])
    for i in range(0, len(items) - 1, 2):
        if items[i][1] == key:
            items[i + 1] = value
            return ("*", items)
    raise KeyError(key)


def ids(*names):
    """An array of bulks (nodes-delivered, nodes-confirmed)."""
    return ("*", [("$", n) for n in names])


def is_record(v):
    """A SHOW record: 15 fields."""
    return v[0] == "*" and v[1] is not None and len(v[1]) == 30
