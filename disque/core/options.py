"""Job options: what ADDJOB's extensions (docs/extensions.md) fix for a job.

``PRIORITY p``, ``BACKOFF FIXED ms`` / ``BACKOFF EXP base max``,
``MAXDELIVERIES n`` and ``DEADLETTER queue`` are held in one immutable
:class:`JobOptions` per job (like REPLICATE and RETRY they never change),
and a job in a dead-letter queue carries where it came from and why.  Jobs
that use no extension have none (``JobExtra.opts is None``) and behave as
the original's, byte for byte.  Options are hashable: the jobs with equal
options share one ``JobExtra``, so they cost no memory per job.

The same byte layout carries them on the bus (version 3 job records) and in
the AOF (LOADJOB record version 4), written and read here only::

    priority:u8                     0 = no options (nothing follows)
    backoff:u32  backoff_max:u32    ms; 0 0 = no BACKOFF; FIXED: equal
    max_deliveries:u32              0 = no limit
    deadletter:u32+bytes            "" = the default, "<queue>:dead"
    dead_from:u32+bytes             "" = not a dead letter
    dead_reason:u32+bytes

Invariants (checked by :func:`decode`, so no peer or file can break them):
``PRIORITY_MIN <= priority <= PRIORITY_MAX``; ``0 <= backoff <=
backoff_max <= MAX_BACKOFF_MS`` and both zero or both positive; a dead
letter (``dead_from``) has a reason.
"""

import struct
from collections import namedtuple

# The ranges are in .limits (the clients check them too); named here as well.
from .limits import MAX_BACKOFF_MS, MAX_DELIVERIES, PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN

__all__ = ["BACKOFF_JITTER", "BadOptions", "DEAD_SUFFIX", "JobOptions", "MAX_BACKOFF_MS", "MAX_DELIVERIES",
           "PRIORITY_DEFAULT", "PRIORITY_MAX", "PRIORITY_MIN", "REASON_MAX_DELIVERIES", "decode", "encode", "make"]

#: The backoff's random part: a delay is drawn from [1 - JITTER, 1] times the
#: computed one, so copies NACKed together do not all come back together,
#: and a delay never exceeds its cap.
BACKOFF_JITTER = 0.2
#: Why a job is in a dead-letter queue.
REASON_MAX_DELIVERIES = b"max-deliveries"
DEAD_SUFFIX = b":dead"


class JobOptions(namedtuple("JobOptions", "priority backoff backoff_max max_deliveries deadletter dead_from "
                                          "dead_reason")):
    """A job's extension options; see the module docstring.  Build them
    with :func:`make` (defaults for what is not given)."""

    __slots__ = ()

    def deadletter_queue(self, queue: bytes) -> bytes:
        """Where a job of ``queue`` with these options goes when it dies."""
        return self.deadletter or queue + DEAD_SUFFIX

    def backoff_delay(self, nacks: int, random) -> int:
        """The delay (ms) before the ``nacks``-th NACK's requeue: BACKOFF
        doubled for each NACK after the first, capped, less up to
        ``BACKOFF_JITTER`` of it at random (``random()`` in [0, 1)).  0
        without BACKOFF."""
        base = self.backoff
        if not base:
            return 0
        cap = self.backoff_max
        shift = nacks - 1 if nacks > 1 else 0
        delay = cap if shift >= 32 else min(cap, base << shift)
        return delay - int(delay * BACKOFF_JITTER * random())


def make(priority=PRIORITY_DEFAULT, backoff=0, backoff_max=0, max_deliveries=0, deadletter=b"", dead_from=b"",
         dead_reason=b"") -> JobOptions:
    return JobOptions(priority, backoff, backoff_max, max_deliveries, deadletter, dead_from, dead_reason)


class BadOptions(ValueError):
    """Encoded options that break an invariant or are cut short."""


_FIXED = struct.Struct(">BIII")
_LEN = struct.Struct(">I")


def encode(opts) -> bytes:
    """The bytes of ``opts`` (None: the single byte 0)."""
    if opts is None:
        return b"\x00"
    if opts.priority == 0:  # would read back as "no options"
        raise BadOptions("priority out of range")
    return b"".join((_FIXED.pack(opts.priority, opts.backoff, opts.backoff_max, opts.max_deliveries),
                     _LEN.pack(len(opts.deadletter)), opts.deadletter,
                     _LEN.pack(len(opts.dead_from)), opts.dead_from,
                     _LEN.pack(len(opts.dead_reason)), opts.dead_reason))


def decode(data, pos: int):
    """``(opts, next position)`` from ``data`` at ``pos``; raises BadOptions."""
    try:
        if data[pos] == 0:
            return None, pos + 1
        priority, backoff, backoff_max, max_deliveries = _FIXED.unpack_from(data, pos)
        pos += _FIXED.size
        texts = []
        for _ in range(3):
            (n,) = _LEN.unpack_from(data, pos)
            text = bytes(data[pos + 4:pos + 4 + n])
            if len(text) != n:
                raise BadOptions("options cut short")
            texts.append(text)
            pos += 4 + n
    except (IndexError, struct.error):
        raise BadOptions("options cut short") from None
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise BadOptions("priority out of range")
    if backoff > backoff_max or (backoff == 0) != (backoff_max == 0):
        raise BadOptions("bad backoff")
    if texts[1] and not texts[2]:
        raise BadOptions("dead letter without a reason")
    return JobOptions(priority, backoff, backoff_max, max_deliveries, *texts), pos
