"""Reading an append only file back: its records in order, each checksum
verified, and damage told apart from the rest (the record format is in
:mod:`.records`).  :func:`scan_records` is the reader the load
(:class:`disque.persistence.load.Load`) and ``check_aof`` use;
:func:`read_records` gives the raw commands.

:func:`scan_records` tells *damage* (bytes the disk changed or lost) from
the rest:

* a checksummed record (LOADJOB, DELJOB, CATALOG) whose framing parses
  but whose checksum does not match (``checksum mismatch``), or an
  unchecksummed LOADJOB that does not deserialize: one damaged record, and
  reading goes on after it;
* bytes that are not a record at all (a bad length, an unknown command:
  *framing* damage): if they start with a checksummed record whose length
  alone is damaged (its checksum verifies up to a record trailer), that
  record is the damage; otherwise reading resumes at the first later
  offset where a checksummed LOADJOB, DELJOB or CATALOG record parses and
  its checksum verifies (:mod:`.resync` finds both).  A false match takes
  a CRC collision, or a job body that holds a well-formed record (client
  data: docs/persistence.md says when that matters); records without
  checksums can give no such certainty, so with none after the damage
  there is nowhere to resume and the file is unusable
  (:class:`~.records.AOFError`).

A checksummed LOADJOB whose checksum verifies but that does not
deserialize, or such a CATALOG record whose entry does not decode, is
*not* damage: the bytes are as written (a record or entry version of a
newer node, say) and the file is refused whatever the policy (skipping it
would drop it from the file at the rewrite that follows).  A torn
tail is not damage either: whatever the parser sees as a record that is
still incomplete at the end of the file (the last writes before a crash,
with zeroed blocks after a power cut on some file systems), unless it is a
record whose length alone is damaged (above); ``aof-load-truncated`` deals
with it.  Looking for whole records after it would not tell a torn record
from one whose body holds a record.

Invariants: every record yielded is whole and its ``end`` is exact (records
are written canonically); a checksummed record that verifies takes the
short way in :func:`_read_from`, anything else goes through
:func:`_read_unverified`.
"""

from zlib import crc32

from ..core.catalog import BadEntry, decode_entry
from ..core.job import BadRecord, deserialize
from ..resp.codec import ProtocolError, RequestParser
from .records import (CATALOG, CHECKSUMMED_FRAMING_LEN, CHUNK, CRC_LEN, CRC_SEEDS, DAMAGE, DELJOB, LOADJOB,
                      RESTART, AOFError, Damage, encoded_len, record_job_id, record_subject)
from .resync import end_despite_length, job_ids_in, next_verified_record


def read_records(path, on_progress=None):
    """Yield ``(argv, end_offset)`` for each record of the file at
    ``path``, ``argv`` being the command without its checksum (verified):
    ``[b"LOADJOB", record]``, ``[b"DELJOB", id]``, ``[b"CATALOG", entry]``
    (its encoding), ``[b"CONTROLLED-RESTART"]``; at the end yield
    ``(None, good_length)``: where the last complete record ends, less than
    the file size if the tail is truncated.  Raises AOFError at the first damage, with the
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
      without ``decode``), ``(DELJOB, job_id, end)``, ``(CATALOG, entry,
      end)`` (a decoded catalog Entry; its encoding without ``decode``),
      ``(RESTART, None, end)`` for each whole record, its checksum
      verified if it has one (``end``: the offset where it ends, exact);
    * ``(DAMAGE, damage, end)`` for each :class:`Damage`, only with
      ``skip_damaged`` (``end``: where reading goes on); without it, the
      first damage raises its AOFError;
    * last, ``(None, None, good_length)``: where the last whole record
      ends, less than the file size if the tail is torn.

    Raises AOFError for a file that cannot be read on: framing damage with
    no checksummed record after it, or a record that is not damage but
    cannot be loaded (see the module docstring).  ``on_progress(offset)``
    is called after each chunk read.  Without ``decode`` a LOADJOB record
    is not deserialized (nor a CATALOG record decoded), so neither an
    unchecksummed one that would not deserialize nor a checksummed one not
    understood is noticed."""
    with open(path, "rb") as f:
        size = _file_size(f)
        start = 0
        while True:
            stop = yield from _read_from(f, start, on_progress, skip_damaged, decode)
            if stop[0] == "eof":
                good = stop[1]
                if good < size:  # a torn write, or a damaged length?
                    resume = end_despite_length(f, good, size)
                    if resume is not None:
                        stop = ("framing", good, "a record whose length runs past the end of the file", resume)
                if stop[0] == "eof":
                    yield None, None, good
                    return
            _, offset, reason = stop[:3]
            if len(stop) > 3:
                resume = stop[3]
            else:
                resume = end_despite_length(f, offset, size) or next_verified_record(f, offset + 1, size)
            if resume is None:  # nowhere to resume: the policy cannot help
                text = Damage(offset, size, reason, framing=True).error().args[0]
                if skip_damaged:
                    text += (", and no whole checksummed record after it to resume at (a file written before "
                             "record checksums, or damage that runs to its end)")
                raise AOFError(text, offset)
            ids, count = job_ids_in(f, offset, resume)
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


def _read_from(f, start, on_progress, skip_damaged, decode):
    """Yield the records from ``start`` on (see scan_records); return
    ``("eof", good_length)`` at the end of the file or ``("framing",
    offset, reason)`` at framing damage.  Checksummed LOADJOB, DELJOB and
    CATALOG records that verify take the short way; :func:`_read_unverified`
    reads the rest."""
    f.seek(start)
    parser = RequestParser(max_bulk_len=1 << 40)
    offset = start
    verified = _VERIFIED
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            return "eof", offset
        try:
            commands = parser.feed_parse(chunk)
            while commands:
                for argv in commands:
                    if len(argv) == 3:
                        known = verified.get(argv[0])
                        if known is not None:
                            kind, seed, fixed = known
                            value = argv[1]
                            if argv[2] == b"%08x" % crc32(value, seed):
                                n = len(value)
                                end = offset + fixed + n + len(str(n))
                                yield kind, _decoded(kind, value, offset) if decode else value, end
                                offset = end
                                continue
                    kind, value, end = _read_unverified(argv, offset, decode)
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


_KINDS = {LOADJOB: LOADJOB, DELJOB: DELJOB, CATALOG: CATALOG}  # a checksummed record's name -> its kind
# The same, as the short way reads it: (its kind, its CRC seed, the bytes of its framing).
_VERIFIED = {name: (kind, CRC_SEEDS[kind], CHECKSUMMED_FRAMING_LEN[kind]) for name, kind in _KINDS.items()}


def _read_unverified(argv, offset, decode=True):
    """``(kind, value, end)`` for a record at ``offset`` that is not a
    checksummed record that verifies: a record written before checksums,
    the marker, or a :class:`Damage` (``framing`` set for bytes that are
    not a record)."""
    n = len(argv)
    name = argv[0].upper()  # (as the original's command lookup)
    end = offset + encoded_len(argv)
    kind = _KINDS.get(name)
    if n == 3 and kind is not None:
        value, crc = argv[1], argv[2]
        if len(crc) != CRC_LEN:
            return DAMAGE, Damage(offset, end, "malformed %s record" % name.decode(), framing=True), end
        if crc == b"%08x" % crc32(value, CRC_SEEDS[kind]):  # the name's case changed, the rest verifies
            return kind, _decoded(kind, value, offset) if decode else value, end
        job_id = record_job_id(kind, value)
        return DAMAGE, Damage(offset, end, "checksum mismatch", (job_id,) if job_id else (),
                              subject=record_subject(kind, value)), end
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


def _decoded(kind, value, offset):
    """What a checksummed record holds: the Job of a LOADJOB, the Entry of
    a CATALOG record, the ID of a DELJOB.  Its checksum verified, so bytes
    that do not decode are as written (by a newer version?), not damage:
    they raise the AOFError that refuses the file whatever the policy."""
    try:
        if kind is LOADJOB:
            return deserialize(value)
        if kind is CATALOG:
            return decode_entry(value)
    except BadRecord as e:
        raise AOFError("LOADJOB record of job %s not understood (%s) after offset %d: its checksum verifies, so "
                       "it is as written (by a newer version?), not damaged"
                       % ((record_job_id(LOADJOB, value) or b"unknown").decode(), e, offset), offset) from None
    except BadEntry as e:
        raise AOFError("CATALOG record not understood (%s) after offset %d: its checksum verifies, so it is as "
                       "written (by a newer version?), not damaged" % (e, offset), offset) from None
    return value
