"""Where damage in an append only file ends, and what it names: the cold
path of :mod:`.scan`, taken only at framing damage.

* :func:`end_despite_length`: the end of a checksummed record whose length
  alone is damaged (its checksum verifies up to a record trailer);
* :func:`next_verified_record`: the first later offset where a
  checksummed LOADJOB, DELJOB or CATALOG record parses whole and verifies,
  where reading resumes;
* :func:`job_ids_in`: the job IDs damaged bytes name, for the log.

Invariant: a resume point is only ever a record whose CRC verifies, so a
false one takes a CRC collision or a job body holding a well-formed record
(see :mod:`.scan`).
"""

import re
from zlib import crc32

from ..core.jobid import JOB_ID_LEN, is_valid
from .records import CHUNK, CRC_LEN, CRC_SEEDS, JOB_ID_OFFSET

# Where reading may resume after framing damage: a checksummed record's header.
_CHECKSUMMED_HEADER_START = re.compile(rb"\*3\r\n(?:\$7\r\nLOADJOB|\$6\r\nDELJOB|\$7\r\nCATALOG)\r\n\$")
_HEADER = re.compile(rb"\*3\r\n\$(7|6)\r\n(LOADJOB|DELJOB|CATALOG)\r\n\$(\d{1,20})\r\n")
# The end of a checksummed record.
_TRAILER_TEXT = b"\r\n$8\r\n01234567\r\n"
_TRAILER = re.compile(rb"\r\n\$8\r\n([0-9a-f]{8})\r\n")
# Job IDs in damaged bytes (for the log): a LOADJOB or DELJOB header, with or without a checksum;
# a CATALOG header is counted as a record, and names no job.
_ID_HEADER = re.compile(rb"(LOADJOB)\r\n\$\d{1,20}\r\n|(DELJOB)\r\n\$40\r\n|CATALOG\r\n\$\d{1,20}\r\n")
SCAN_OVERLAP = 64  # bytes kept between two chunks scanned for a header (longer than any header)


def next_verified_record(f, start, size):
    """The first offset from ``start`` on where a checksummed LOADJOB,
    DELJOB or CATALOG record parses whole and its checksum verifies, or
    None."""
    pos = start
    while pos < size:
        f.seek(pos)
        chunk = f.read(CHUNK)
        if not chunk:
            break
        for m in _CHECKSUMMED_HEADER_START.finditer(chunk):
            at = pos + m.start()
            if _record_verifies_at(f, at, size):
                return at
        if pos + len(chunk) >= size:
            break
        pos += len(chunk) - SCAN_OVERLAP  # (a header cut by the chunk's end is found in the next one)
    return None


def end_despite_length(f, at, size):
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
    crc = CRC_SEEDS[m.group(2)]
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


def _record_verifies_at(f, at, size):
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
    return rest[n + 6:n + 14] == b"%08x" % crc32(memoryview(rest)[:n], CRC_SEEDS[m.group(2)])


def job_ids_in(f, start, end):
    """``(job_ids, records)``: the job IDs the bytes ``[start, end)`` name
    in LOADJOB and DELJOB headers, as far as they can be read, and the
    number of record headers (CATALOG ones too)."""
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
                job_id = chunk[m.end() + JOB_ID_OFFSET:m.end() + JOB_ID_OFFSET + JOB_ID_LEN]
            elif m.group(2):
                job_id = chunk[m.end():m.end() + JOB_ID_LEN]
            else:
                continue
            if is_valid(job_id) and job_id.isascii() and job_id not in ids:
                ids.append(job_id)
        if limit < CHUNK:
            break
        pos += limit - SCAN_OVERLAP
    return ids, count
