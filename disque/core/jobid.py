"""Job IDs: ``D-<node8>-<144 random bits, base64>-<ttl4>`` (40 bytes).

* ``node8`` is the first 8 hex chars of the creating node's ID, so consumers
  can tell where jobs are produced.
* the random part is 144 bits from a Mersenne Twister seeded with 20 bytes
  of OS entropy per node: unique in practice (a collision needs ~2^72 IDs)
  without a syscall or a hash per job.  IDs are names, not secrets: like the
  original's, they are not meant to be unguessable.  The bits are drawn and
  base64-encoded ``POOL`` IDs at a time (18 bytes encode to exactly 24
  characters, so the encoding of the whole draw is the IDs' random parts
  end to end): one big draw and one encoding instead of one per job.
* ``ttl4`` is the TTL in minutes, big endian hex, capped at 0xffff, and forced
  *odd* for at-least-once jobs (RETRY > 0) and *even* for at-most-once jobs
  (RETRY 0).  A node that does not know a job can still tell its TTL and its
  delivery guarantee from the ID alone (dummy ACKs rely on it).
"""

import os
import random
from binascii import b2a_base64
from typing import Optional

JOB_ID_LEN = 40


#: IDs drawn and encoded at a time (see the module docstring).
POOL = 256


class JobIdGenerator:
    """Generates job IDs for one node.  Not thread safe (the node is not).

    Invariant: ``_pool[_next:]`` are the random parts (24 base64
    characters each) not handed out yet."""

    __slots__ = ("_prefix", "_bits", "_pool", "_next")

    def __init__(self, node_id: bytes, seed: Optional[bytes] = None):
        self._prefix = b"D-" + node_id[:8] + b"-"
        self._bits = random.Random(seed if seed is not None else os.urandom(20)).getrandbits
        self._pool = b""
        self._next = 0

    def set_node_id(self, node_id: bytes) -> None:
        self._prefix = b"D-" + node_id[:8] + b"-"

    def new_id(self, ttl: int, retry: int) -> bytes:
        """Return a new ID for a job with ``ttl`` seconds and ``retry`` seconds."""
        i = self._next
        if i >= len(self._pool):
            self._pool = b2a_base64(self._bits(144 * POOL).to_bytes(18 * POOL, "big"), newline=False)
            i = 0
        self._next = i + 24
        return self._prefix + self._pool[i:i + 24] + _suffix(ttl, retry > 0)


_SUFFIXES = {}  # (ttl, at_least_once) -> suffix: a plain dict (PyPy's lru_cache is Python code)


def _suffix(ttl: int, at_least_once: bool) -> bytes:
    """The ``-tttt`` suffix: TTL minutes, odd iff at-least-once."""
    suffix = _SUFFIXES.get((ttl, at_least_once))
    if suffix is None:
        if len(_SUFFIXES) >= 4096:
            _SUFFIXES.clear()
        suffix = _SUFFIXES[(ttl, at_least_once)] = _make_suffix(ttl, at_least_once)
    return suffix


def _make_suffix(ttl, at_least_once):
    minutes = ttl // 60
    if minutes > 0xFFFF:
        minutes = 0xFFFF
    minutes = (minutes | 1) if at_least_once else (minutes & ~1)
    return b"-%04x" % minutes


def ttl_suffix(ttl: int, retry: int) -> bytes:
    return _suffix(ttl, retry > 0)


def is_valid(job_id: bytes) -> bool:
    """Cheap structural check, as the original: length, prefix, separators."""
    return (
        len(job_id) == JOB_ID_LEN
        and job_id[0] == 68  # 'D'
        and job_id[1] == 45  # '-'
        and job_id[10] == 45
        and job_id[35] == 45
    )


def ttl_minutes(job_id: bytes) -> int:
    """The TTL in minutes encoded in a (valid) job ID; bad hex digits count 0."""
    value = 0
    for ch in job_id[36:40]:
        digit = _HEX.get(ch, 0)
        value = (value << 4) | digit
    return value


_HEX = {c: i for i, c in enumerate(b"0123456789abcdef")}
_HEX.update({c: i + 10 for i, c in enumerate(b"ABCDEF")})


def is_at_most_once(job_id: bytes) -> bool:
    """True when the ID belongs to a RETRY 0 job (even TTL field)."""
    return ttl_minutes(job_id) & 1 == 0
