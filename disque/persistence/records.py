"""The records of the append only file: how they are encoded, read back
and applied ("Disque and disk persistence" in the spec).

Records are Redis-protocol commands, as in the original's AOF::

    LOADJOB <job record>     a job became known here (disque.core.job.serialize)
    DELJOB <id>              it is gone (acked, deleted, expired)
    CONTROLLED-RESTART       first record of a file written by SHUTDOWN
                             REWRITE-AOF: load it even with appendonly no,
                             and put queued jobs back in their queues

Records are written canonically (the encoding of an argv is unique), so
the offset where each one ends is known exactly from its argv.
"""

from ..core.job import BadRecord, deserialize, serialize
from ..interfaces import LoadError
from ..resp.codec import ProtocolError, RequestParser

CHUNK = 1 << 20
MARKER = b"*1\r\n$18\r\nCONTROLLED-RESTART\r\n"


class AOFError(LoadError):
    """The append only file cannot be loaded: start-up stops.  ``offset``:
    where the last good record ends, if known."""

    def __init__(self, message, offset=None):
        super().__init__(message)
        self.offset = offset


def encode(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n" % len(a))
        out.append(a)
        out.append(b"\r\n")
    return b"".join(out)


def record_bytes(record) -> bytes:
    kind, value = record
    if kind == b"LOADJOB":
        return encode(b"LOADJOB", serialize(value))
    return encode(kind, value)


def encoded_len(argv) -> int:
    """The length of the canonical encoding of ``argv``."""
    n = len(b"*%d\r\n" % len(argv))
    for a in argv:
        n += len(b"$%d\r\n" % len(a)) + len(a) + 2
    return n


def read_records(path, on_progress=None):
    """Yield ``(argv, end_offset)`` for each record of the file at ``path``
    (records are written canonically, so the offset is exact); at the end
    yield ``(None, good_length)``: where the last complete record ends, less
    than the file size if the tail is truncated.  Raises AOFError for bytes
    that are not a record, with the offset of the last good one."""
    parser = RequestParser(max_bulk_len=1 << 40)
    offset = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            try:
                commands = parser.feed_parse(chunk)
                while commands:
                    for argv in commands:
                        offset += encoded_len(argv)
                        yield argv, offset
                    commands = parser.parse()
            except ProtocolError as e:
                raise AOFError("bad file format after offset %d: %s" % (offset, e.args[0].decode()),
                               offset)
            if on_progress is not None:
                on_progress(offset)
    yield None, offset


def apply_record(node, argv):
    """Apply one record to ``node`` (None: check only); return a problem
    description or None."""
    name = argv[0].upper()
    if name == b"LOADJOB" and len(argv) == 2:
        try:
            job = deserialize(argv[1])
        except BadRecord as e:
            return "bad LOADJOB record (%s)" % e
        if node is not None:
            node.jobs.load(job)
    elif name == b"DELJOB" and len(argv) == 2:
        if node is not None:
            node.jobs.load_delete(argv[1])
    elif name == b"CONTROLLED-RESTART" and len(argv) == 1:
        pass
    else:
        return "unknown record %r" % argv[0][:32]
    return None
