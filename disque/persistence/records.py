"""The records of the append only file: how they are encoded and read
back, checksums verified and damage found ("Disque and disk persistence"
in the spec); :class:`disque.persistence.load.Load` applies them.

Records are Redis-protocol commands, as in the original's AOF::

    LOADJOB <job record> <crc>   a job became known here (disque.core.job.serialize)
    DELJOB <id> <crc>            it is gone (acked, deleted, expired)
    CONTROLLED-RESTART           first record of a file written by SHUTDOWN
                                 REWRITE-AOF: load it even with appendonly no,
                                 and put queued jobs back in their queues

``<crc>`` is the checksum of the record: 8 lowercase hex digits of the
CRC-32 of the command name followed by its argument, i.e.
``zlib.crc32(b"LOADJOB" + record)`` (the ISO-HDLC CRC-32 of gzip, PNG and
Ethernet).  It finds the damage the framing cannot: a flipped bit in a job
body, which would otherwise load and be served.  CRC-32 catches every
error of 1 to 3 bits in a record of up to 11 KB, every burst of up to 32
bits, and anything else but one time in 2**32.  CRC-32C (Castagnoli, as
LevelDB and RocksDB use) has the better distance between code words, but
the standard library has only ``zlib.crc32``, which is C code on CPython
and PyPy alike, so it costs little on the write path (docs/persistence.md
gives the figures); a dependency for CRC-32C would buy nothing against the
damage a disk does to a file (single flips, bursts, zeroed blocks).

Files written before record checksums hold the same commands without the
last argument (``*2 LOADJOB <record>``, ``*2 DELJOB <id>``); they still
load, unchecked, and a file may mix both forms (an old file appended to by
a newer node).  A file with checksummed records does not load in a version
that predates them: it refuses it as it refuses any unknown record.  The
marker has no checksum: it is compared byte for byte.

Records are written canonically (the encoding of an argv is unique), so
the offset where each one ends is known exactly from its argv.

Damage
------

:func:`scan_records` tells *damage* (bytes the disk changed or lost) from
the rest:

* a checksummed record whose framing parses but whose checksum does not
  match (``checksum mismatch``), or an unchecksummed LOADJOB that does not
  deserialize: one damaged record, and reading goes on after it;
* bytes that are not a record at all (a bad length, an unknown command:
  *framing* damage): if they start with a checksummed record whose length
  alone is damaged (its checksum verifies up to a record trailer), that
  record is the damage; otherwise reading resumes at the first later
  offset where a checksummed LOADJOB or DELJOB record parses and its
  checksum verifies.  A false match takes a CRC collision, or a job body
  that holds a well-formed record (client data: docs/persistence.md says
  when that matters); records without checksums can give no such
  certainty, so with none after the damage there is nowhere to resume and
  the file is unusable (:class:`AOFError`).

A checksummed LOADJOB whose checksum verifies but that does not
deserialize is *not* damage: the bytes are as written (a record version of
a newer node, say) and the file is refused whatever the policy.  A torn
tail is not damage either: whatever the parser sees as a record that is
still incomplete at the end of the file (the last writes before a crash,
with zeroed blocks after a power cut on some file systems), unless it is a
record whose length alone is damaged (above); ``aof-load-truncated`` deals
with it.  Looking for whole records after it would not tell a torn record
from one whose body holds a record.
"""

import re
import struct
from zlib import crc32

from ..core.job import BadRecord, deserialize, serialize
from ..core.jobid import JOB_ID_LEN, is_valid
from ..interfaces import LoadError
from ..resp.codec import ProtocolError, RequestParser

CHUNK = 1 << 20
MARKER = b"*1\r\n$18\r\nCONTROLLED-RESTART\r\n"

# The kinds scan_records yields (compare with ``is``).
LOADJOB = b"LOADJOB"
DELJOB = b"DELJOB"
RESTART = b"CONTROLLED-RESTART"
DAMAGE = "damage"

_SEED = {LOADJOB: crc32(LOADJOB), DELJOB: crc32(DELJOB)}  # crc32(name + arg) == crc32(arg, _SEED[name])
_LOADJOB_SEED = _SEED[LOADJOB]
_DELJOB_SEED = _SEED[DELJOB]
CRC_LEN = 8
# Bytes of a checksummed record besides its argument and the digits of its length.
_FIXED = {name: len(b"*3\r\n$%d\r\n%b\r\n$\r\n\r\n$8\r\n\r\n" % (len(name), name)) + CRC_LEN
          for name in (LOADJOB, DELJOB)}
# Where a LOADJOB record (disque.core.job.serialize) keeps the job's ID: after
# version:u8 state:u8 repl:u16 and seven i64.
_ID_AT = struct.calcsize(">BBHqqqqqqq")
# Where reading may resume after framing damage: a checksummed record's header.
_RESYNC = re.compile(rb"\*3\r\n(?:\$7\r\nLOADJOB|\$6\r\nDELJOB)\r\n\$")
_HEADER = re.compile(rb"\*3\r\n\$(7|6)\r\n(LOADJOB|DELJOB)\r\n\$(\d{1,20})\r\n")
# The end of a checksummed record.
_TRAILER_TEXT = b"\r\n$8\r\n01234567\r\n"
_TRAILER = re.compile(rb"\r\n\$8\r\n([0-9a-f]{8})\r\n")
# Job IDs in damaged bytes (for the log): a LOADJOB or DELJOB header, with or without a checksum.
_ID_HEADER = re.compile(rb"(LOADJOB)\r\n\$\d{1,20}\r\n|(DELJOB)\r\n\$40\r\n")
SCAN_OVERLAP = 64  # bytes kept between two chunks scanned for a header (longer than any header)


class AOFError(LoadError):
    """The append only file cannot be loaded: start-up stops.  ``offset``:
    where the last good record ends, if known; ``damage``: the
    :class:`Damage` it is about, if it is damage (``aof-load-damaged skip``
    would have loaded the file without it)."""

    def __init__(self, message, offset=None, damage=None):
        super().__init__(message)
        self.offset = offset
        self.damage = damage


class Damage:
    """Damaged bytes ``[offset, end)`` of a file: one record (``framing``
    False: its framing parsed, the bytes after it are read on) or bytes
    that are not records (``framing`` True: reading resumed at ``end``,
    the next checksummed record that verifies).  ``reason`` says what is
    wrong; ``job_ids`` the jobs the damaged bytes name, as far as they can
    be read; ``records`` how many records they held (at least 1)."""

    __slots__ = ("offset", "end", "reason", "job_ids", "records", "framing")

    def __init__(self, offset, end, reason, job_ids=(), records=1, framing=False):
        self.offset = offset
        self.end = end
        self.reason = reason
        self.job_ids = tuple(job_ids)
        self.records = max(records, 1)
        self.framing = framing

    @property
    def size(self):
        return self.end - self.offset

    def jobs_text(self):
        ids = [i.decode("ascii", "replace") for i in self.job_ids[:10]]
        more = len(self.job_ids) - len(ids)
        return ", ".join(ids) + (" and %d more" % more if more > 0 else "") if ids else "unknown"

    def describe(self):
        """One line for the log and check_aof."""
        if not self.framing:
            return "Damaged AOF record at offset %d: job %s (%s)" % (self.offset, self.jobs_text(), self.reason)
        return ("Damaged AOF bytes at offset %d: %d bytes up to the next whole record (%s); %s"
                % (self.offset, self.size, self.reason,
                   "jobs in them: " + self.jobs_text() if self.job_ids else "no job ID readable in them"))

    def error(self):
        """The AOFError refusing the file for this damage."""
        jobs = " (job %s)" % self.jobs_text() if self.job_ids else ""
        if self.framing and self.reason.startswith("bad file format: "):  # the wording before checksums
            text = "bad file format after offset %d: %s" % (self.offset, self.reason[17:])
        else:
            text = "%s after offset %d%s" % (self.reason, self.offset, jobs)
        return AOFError(text, self.offset, self)


def record_bytes(record) -> bytes:
    """The bytes of one record, ``(b"LOADJOB", job)`` or ``(b"DELJOB",
    job_id)``, checksummed: the one encoder of the AOF (appends and
    rewrites)."""
    kind, value = record
    if kind == LOADJOB:
        data = serialize(value)
        return b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(data), data, crc32(data, _LOADJOB_SEED))
    if kind == DELJOB:
        return b"*3\r\n$6\r\nDELJOB\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(value), value, crc32(value, _DELJOB_SEED))
    raise ValueError("not an AOF record: %r" % (kind,))


def encoded_len(argv) -> int:
    """The length of the canonical encoding of ``argv``."""
    n = len(b"*%d\r\n" % len(argv))
    for a in argv:
        n += len(b"$%d\r\n" % len(a)) + len(a) + 2
    return n


def record_job_id(name, data):
    """The job ID a LOADJOB or DELJOB argument names, if it looks like one
    (damaged bytes may not)."""
    job_id = data[_ID_AT:_ID_AT + JOB_ID_LEN] if name == LOADJOB else data
    return job_id if is_valid(job_id) and job_id.isascii() else None


def read_records(path, on_progress=None):
    """Yield ``(argv, end_offset)`` for each record of the file at
    ``path``, ``argv`` being the command without its checksum (verified):
    ``[b"LOADJOB", record]``, ``[b"DELJOB", id]``,
    ``[b"CONTROLLED-RESTART"]``; at the end yield ``(None, good_length)``:
    where the last complete record ends, less than the file size if the
    tail is truncated.  Raises AOFError at the first damage, with the
    offset where the last good record ends (as a load with
    ``aof-load-damaged refuse``, without deserializing the records)."""
    for kind, value, end in scan_records(path, on_progress, decode=False):
        if kind is None:
            yield None, end
        elif kind is RESTART:
            yield [RESTART], end
        else:
            yield [kind, value], end


def scan_records(path, on_progress=None, skip_damaged=False, decode=True):
    """Read the file at ``path``; yield ``(kind, value, end)``:

    * ``(LOADJOB, job, end)`` (a deserialized Job; its record bytes
      without ``decode``), ``(DELJOB, job_id, end)``, ``(RESTART, None,
      end)`` for each whole record, its checksum verified if it has one
      (``end``: the offset where it ends, exact);
    * ``(DAMAGE, damage, end)`` for each :class:`Damage`, only with
      ``skip_damaged`` (``end``: where reading goes on); without it, the
      first damage raises its AOFError;
    * last, ``(None, None, good_length)``: where the last whole record
      ends, less than the file size if the tail is torn.

    Raises AOFError for a file that cannot be read on: framing damage with
    no checksummed record after it, or a record that is not damage but
    cannot be loaded (see the module docstring).  ``on_progress(offset)``
    is called after each chunk read.  Without ``decode`` a LOADJOB record
    is not deserialized, so neither an unchecksummed one that would not
    deserialize nor a checksummed one not understood is noticed."""
    with open(path, "rb") as f:
        size = _file_size(f)
        start = 0
        while True:
            stop = yield from _parse(f, start, on_progress, skip_damaged, decode)
            if stop[0] == "eof":
                good = stop[1]
                if good < size:  # a torn write, or a damaged length?
                    resume = _end_despite_length(f, good, size)
                    if resume is not None:
                        stop = ("framing", good, "a record whose length runs past the end of the file", resume)
                if stop[0] == "eof":
                    yield None, None, good
                    return
            _, offset, reason = stop[:3]
            if len(stop) > 3:
                resume = stop[3]
            else:
                resume = _end_despite_length(f, offset, size) or _resync(f, offset + 1, size)
            if resume is None:  # nowhere to resume: the policy cannot help
                text = Damage(offset, size, reason, framing=True).error().args[0]
                if skip_damaged:
                    text += (", and no whole checksummed record after it to resume at (a file written before "
                             "record checksums, or damage that runs to its end)")
                raise AOFError(text, offset)
            ids, count = _ids_in(f, offset, resume)
            damage = Damage(offset, resume, reason, ids, count, framing=True)
            if not skip_damaged:
                raise damage.error()
            yield DAMAGE, damage, resume
            start = resume


def _file_size(f):
    f.seek(0, 2)
    size = f.tell()
    f.seek(0)
    return size


def _parse(f, start, on_progress, skip_damaged, decode):
    """Yield the records from ``start`` on (see scan_records); return
    ``("eof", good_length)`` at the end of the file or ``("framing",
    offset, reason)`` at framing damage.  Checksummed LOADJOB and DELJOB
    records that verify take the short way; :func:`_other` reads the
    rest."""
    f.seek(start)
    parser = RequestParser(max_bulk_len=1 << 40)
    offset = start
    loadjob_seed, deljob_seed = _LOADJOB_SEED, _DELJOB_SEED
    loadjob_fixed, deljob_fixed = _FIXED[LOADJOB], _FIXED[DELJOB]
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            return "eof", offset
        try:
            commands = parser.feed_parse(chunk)
            while commands:
                for argv in commands:
                    if len(argv) == 3:
                        name = argv[0]
                        if name == LOADJOB:
                            value = argv[1]
                            if argv[2] == b"%08x" % crc32(value, loadjob_seed):
                                n = len(value)
                                end = offset + loadjob_fixed + n + len(str(n))
                                if decode:
                                    try:
                                        value = deserialize(value)
                                    except BadRecord as e:
                                        raise _not_understood(value, e, offset) from None
                                yield LOADJOB, value, end
                                offset = end
                                continue
                        elif name == DELJOB:
                            value = argv[1]
                            if argv[2] == b"%08x" % crc32(value, deljob_seed):
                                n = len(value)
                                end = offset + deljob_fixed + n + len(str(n))
                                yield DELJOB, value, end
                                offset = end
                                continue
                    kind, value, end = _other(argv, offset, decode)
                    if kind is DAMAGE:
                        if value.framing:
                            return "framing", offset, value.reason
                        if not skip_damaged:
                            raise value.error()
                    yield kind, value, end
                    offset = end
                commands = parser.parse()
        except ProtocolError as e:
            return "framing", offset, "bad file format: %s" % e.args[0].decode("ascii", "backslashreplace")
        if on_progress is not None:
            on_progress(offset)


def _other(argv, offset, decode=True):
    """``(kind, value, end)`` for a record at ``offset`` that is not a
    checksummed LOADJOB or DELJOB that verifies: a record written before
    checksums, the marker, or a :class:`Damage` (``framing`` set for bytes
    that are not a record)."""
    n = len(argv)
    name = argv[0].upper()  # (as the original's command lookup)
    end = offset + encoded_len(argv)
    if n == 3 and (name == LOADJOB or name == DELJOB):
        value, crc = argv[1], argv[2]
        if len(crc) != CRC_LEN:
            return DAMAGE, Damage(offset, end, "malformed %s record" % name.decode(), framing=True), end
        if crc == b"%08x" % crc32(value, _SEED[name]):  # the name's case changed, the rest verifies
            if name == DELJOB or not decode:
                return name, value, end
            try:
                return LOADJOB, deserialize(value), end
            except BadRecord as e:
                raise _not_understood(value, e, offset) from None
        job_id = record_job_id(name, value)
        return DAMAGE, Damage(offset, end, "checksum mismatch", (job_id,) if job_id else ()), end
    if n == 2 and name == LOADJOB:  # written before record checksums
        if not decode:
            return LOADJOB, argv[1], end
        try:
            return LOADJOB, deserialize(argv[1]), end
        except BadRecord as e:
            job_id = record_job_id(name, argv[1])
            return DAMAGE, Damage(offset, end, "bad LOADJOB record (%s)" % e, (job_id,) if job_id else ()), end
    if n == 2 and name == DELJOB:
        return DELJOB, argv[1], end
    if n == 1 and name == RESTART:
        return RESTART, None, end
    return DAMAGE, Damage(offset, end, "unknown record %r" % argv[0][:32], framing=True), end


def _not_understood(value, error, offset):
    """The AOFError for a checksummed LOADJOB that verifies but does not
    deserialize: not damage, so never skipped."""
    return AOFError("LOADJOB record of job %s not understood (%s) after offset %d: its checksum verifies, so it "
                    "is as written (by a newer version?), not damaged"
                    % ((record_job_id(LOADJOB, value) or b"unknown").decode(), error, offset), offset)


def _resync(f, start, size):
    """The first offset from ``start`` on where a checksummed LOADJOB or
    DELJOB record parses whole and its checksum verifies, or None."""
    pos = start
    while pos < size:
        f.seek(pos)
        chunk = f.read(CHUNK)
        if not chunk:
            break
        for m in _RESYNC.finditer(chunk):
            at = pos + m.start()
            if _verifies_at(f, at, size):
                return at
        if pos + len(chunk) >= size:
            break
        pos += len(chunk) - SCAN_OVERLAP  # (a header cut by the chunk's end is found in the next one)
    return None


def _end_despite_length(f, at, size):
    """Where the checksummed record at ``at`` ends if only its length is
    damaged: the end of the first record trailer (``\\r\\n$8\\r\\n<crc>\\r\\n``)
    after its header whose checksum verifies over the bytes before it; or
    None.  A false match takes a CRC collision, and a client cannot plant
    one in a job body: the checksum covers the record's head, job ID
    included, which the node makes."""
    f.seek(at)
    m = _HEADER.match(f.read(48))
    if m is None:
        return None
    base = done = at + m.end()  # the crc covers the name and the bytes [body, done)
    crc = _SEED[m.group(2)]
    while base < size:
        f.seek(base)
        chunk = f.read(CHUNK)
        for t in _TRAILER.finditer(chunk):
            p = base + t.start()
            if p < done:
                continue  # (seen in the previous chunk)
            crc = crc32(memoryview(chunk)[done - base:t.start()], crc)
            done = p
            if t.group(1) == b"%08x" % crc:
                return p + len(t.group(0))
        if base + len(chunk) >= size:
            break
        nxt = base + len(chunk) - len(_TRAILER_TEXT)  # (a trailer cut by the chunk's end is found in the next one)
        if done < nxt:
            crc = crc32(memoryview(chunk)[done - base:nxt - base], crc)
            done = nxt
        base = nxt
    return None


def _verifies_at(f, at, size):
    f.seek(at)
    head = f.read(48)
    m = _HEADER.match(head)
    if m is None:
        return False
    n = int(m.group(3))
    body_at = at + m.end()
    end = body_at + n + 2 + 4 + CRC_LEN + 2
    if end > size:
        return False
    f.seek(body_at)
    rest = f.read(n + 16)
    if rest[n:n + 6] != b"\r\n$8\r\n" or rest[n + 14:n + 16] != b"\r\n":
        return False
    return rest[n + 6:n + 14] == b"%08x" % crc32(memoryview(rest)[:n], _SEED[m.group(2)])


def _ids_in(f, start, end):
    """``(job_ids, records)``: the job IDs the bytes ``[start, end)`` name
    in LOADJOB and DELJOB headers, as far as they can be read, and the
    number of such headers."""
    ids, count, pos = [], 0, start
    while pos < end:
        f.seek(pos)
        chunk = f.read(min(CHUNK, end - pos) + 200)  # (an ID past a header near the end)
        limit = min(len(chunk), end - pos)
        for m in _ID_HEADER.finditer(chunk):
            if m.start() >= limit:
                break
            if pos > start and m.start() < SCAN_OVERLAP:
                continue  # seen in the previous chunk
            count += 1
            if m.group(1):
                job_id = chunk[m.end() + _ID_AT:m.end() + _ID_AT + JOB_ID_LEN]
            else:
                job_id = chunk[m.end():m.end() + JOB_ID_LEN]
            if is_valid(job_id) and job_id.isascii() and job_id not in ids:
                ids.append(job_id)
        if limit < CHUNK:
            break
        pos += limit - SCAN_OVERLAP
    return ids, count

