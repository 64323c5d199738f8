"""The records of the append only file ("Disque and disk persistence" in
the spec): their format and checksums, the one encoder
(:func:`record_bytes`), and what reading them reports (:class:`Damage`,
:class:`AOFError`).  Reading a file back is :mod:`.scan` (its records in
order, damage told apart; :mod:`.resync` finds where damage ends), and
:class:`disque.persistence.load.Load` applies what it reads.

Records are Redis-protocol commands, as in the original's AOF::

    LOADJOB <job record> <crc>   a job became known here (disque.core.job.serialize)
    DELJOB <id> <crc>            it is gone (acked, deleted, expired)
    CATALOG <entry> <crc>        a catalog entry won here (disque.core.catalog.encode_entry):
                                 a schedule, a queue limit, their tombstones
    CONTROLLED-RESTART           first record of a file written by SHUTDOWN
                                 REWRITE-AOF: load it even with appendonly no,
                                 and put queued jobs back in their queues

``<crc>`` is the checksum of the record: 8 lowercase hex digits of the
CRC-32 of the command name followed by its argument, i.e.
``zlib.crc32(b"LOADJOB" + record)``, ``zlib.crc32(b"CATALOG" + entry)``
(the ISO-HDLC CRC-32 of gzip, PNG and Ethernet).  It finds the damage the
framing cannot: a flipped bit in a job body, which would otherwise load
and be served.  CRC-32 catches every
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

CATALOG records came later still, and only ever with a checksum.  A node
that holds no catalog entry writes none, so its file is byte for byte what
the version before them writes; a file with one is refused by that version
as an unknown record (framing damage: ``unknown record b'CATALOG'``).

Records are written canonically (the encoding of an argv is unique), so
the offset where each one ends is known exactly from its argv.

Damage (bytes the disk changed or lost) and how reading goes on after it
are described in :mod:`.scan`.
"""

import struct
from zlib import crc32

from ..core.catalog import BadEntry, encode_entry, entry_key
from ..core.job import serialize
from ..core.jobid import JOB_ID_LEN, is_valid
from ..interfaces import LoadError

CHUNK = 1 << 20  # bytes read at a time (scan, resync)
MARKER = b"*1\r\n$18\r\nCONTROLLED-RESTART\r\n"

# The kinds scan_records yields (compare with ``is``).
LOADJOB = b"LOADJOB"
DELJOB = b"DELJOB"
CATALOG = b"CATALOG"
RESTART = b"CONTROLLED-RESTART"
DAMAGE = "damage"

# crc32(name + arg) == crc32(arg, CRC_SEEDS[name])
CRC_SEEDS = {LOADJOB: crc32(LOADJOB), DELJOB: crc32(DELJOB), CATALOG: crc32(CATALOG)}
_LOADJOB_SEED = CRC_SEEDS[LOADJOB]
_DELJOB_SEED = CRC_SEEDS[DELJOB]
_CATALOG_SEED = CRC_SEEDS[CATALOG]
CRC_LEN = 8
# Bytes of a checksummed record besides its argument and the digits of its length.
CHECKSUMMED_FRAMING_LEN = {name: len(b"*3\r\n$%d\r\n%b\r\n$\r\n\r\n$8\r\n\r\n" % (len(name), name)) + CRC_LEN
                           for name in (LOADJOB, DELJOB, CATALOG)}
# Where a LOADJOB record (disque.core.job.serialize) keeps the job's ID: after
# version:u8 state:u8 repl:u16 and seven i64.
JOB_ID_OFFSET = struct.calcsize(">BBHqqqqqqq")


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
    be read; ``records`` how many records they held (at least 1);
    ``subject``: what a damaged record that names no job held (``catalog
    entry ...``, :func:`record_subject`), for the log."""

    __slots__ = ("offset", "end", "reason", "job_ids", "records", "framing", "subject")

    def __init__(self, offset, end, reason, job_ids=(), records=1, framing=False, subject=None):
        self.offset = offset
        self.end = end
        self.reason = reason
        self.job_ids = tuple(job_ids)
        self.records = max(records, 1)
        self.framing = framing
        self.subject = subject

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
            what = self.subject or "job " + self.jobs_text()
            return "Damaged AOF record at offset %d: %s (%s)" % (self.offset, what, self.reason)
        return ("Damaged AOF bytes at offset %d: %d bytes up to the next whole record (%s); %s"
                % (self.offset, self.size, self.reason,
                   "jobs in them: " + self.jobs_text() if self.job_ids else "no job ID readable in them"))

    def error(self):
        """The AOFError refusing the file for this damage."""
        if self.job_ids:
            jobs = " (job %s)" % self.jobs_text()
        else:
            jobs = " (%s)" % self.subject if self.subject else ""
        if self.framing and self.reason.startswith("bad file format: "):  # the wording before checksums
            text = "bad file format after offset %d: %s" % (self.offset, self.reason[17:])
        else:
            text = "%s after offset %d%s" % (self.reason, self.offset, jobs)
        return AOFError(text, self.offset, self)


def record_bytes(record) -> bytes:
    """The bytes of one record, ``(b"LOADJOB", job)``, ``(b"DELJOB",
    job_id)`` or ``(b"CATALOG", entry)``, checksummed: the one encoder of
    the AOF (appends and rewrites)."""
    kind, value = record
    if kind == LOADJOB:
        data = serialize(value)
        return b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(data), data, crc32(data, _LOADJOB_SEED))
    if kind == DELJOB:
        return b"*3\r\n$6\r\nDELJOB\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(value), value, crc32(value, _DELJOB_SEED))
    if kind == CATALOG:
        data = encode_entry(value)
        return b"*3\r\n$7\r\nCATALOG\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(data), data, crc32(data, _CATALOG_SEED))
    raise ValueError("not an AOF record: %r" % (kind,))


def encoded_len(argv) -> int:
    """The length of the canonical encoding of ``argv``."""
    n = len(b"*%d\r\n" % len(argv))
    for a in argv:
        n += len(b"$%d\r\n" % len(a)) + len(a) + 2
    return n


def record_subject(name, data):
    """What a damaged record that holds no job held, for the log: ``catalog
    entry <kind> <name>`` as the damaged bytes read (the damage may be in
    them, as it may be in a job ID), ``catalog entry`` if they are not
    printable; None for a LOADJOB or DELJOB (their job IDs name them)."""
    if name != CATALOG:
        return None
    try:
        key = entry_key(data)
    except BadEntry:
        key = None
    if key is None or not all(part.isascii() and part.decode().isprintable() for part in key):
        return "catalog entry"
    return "catalog entry %s %s" % (key[0].decode(), key[1].decode())


def record_job_id(name, data):
    """The job ID a LOADJOB or DELJOB argument names, if it looks like one
    (damaged bytes may not); None for a CATALOG record."""
    if name == CATALOG:
        return None
    job_id = data[JOB_ID_OFFSET:JOB_ID_OFFSET + JOB_ID_LEN] if name == LOADJOB else data
    return job_id if is_valid(job_id) and job_id.isascii() else None
