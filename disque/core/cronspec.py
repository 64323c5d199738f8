"""A schedule's definition: when it fires, and the job each run adds.

A schedule (``SCHEDULE ADD``, docs/extensions.md) is a catalog entry of
kind ``schedule`` (:mod:`disque.core.catalog`) whose value is a
:class:`ScheduleSpec` encoded here.  Its runs fire at

* the times of a cron expression (5 fields, or 6 with seconds first, as
  Quartz and NATS write them) in a time zone (IANA name; UTC by default),
  computed by croniter, a well-kept parser, rather than by our own; or
* every ``every_ms`` from ``anchor``: ``anchor + k * every_ms``, k >= 1.

Only runs after ``since`` count: the time the schedule was added, or last
resumed (runs due while it was paused are not owed).

The value's layout (bytes end to end; ``u``: unsigned big endian)::

    version:u8 (1)  paused:u8  catchup:u8  every_ms:u64  anchor:u64  since:u64
    cron:u16+bytes  tz:u16+bytes  queue:u32+bytes  body:u32+bytes
    repl:u16 (0: the ADDJOB default at fire time)  retry:i32 (-1: default)
    ttl:u32  delay:u32  maxlen:u32  options:u32+bytes (disque.core.options)

Invariants (checked by :func:`decode_spec`, so neither a peer nor a file
can break them): exactly one of ``every_ms`` and ``cron`` is set; a cron
expression and its zone parse; ``0 < ttl``, ``0 <= delay < ttl``, ``-1 <=
retry``, all within ADDJOB's bounds.
"""

import struct
from datetime import datetime, timezone
from typing import NamedTuple

from . import options as _options
from .limits import MAX_JOB_SECONDS

SPEC_VERSION = 1
CATCHUP_SKIP, CATCHUP_ONE, CATCHUP_ALL = 0, 1, 2
CATCHUP_NAMES = {b"skip": CATCHUP_SKIP, b"one": CATCHUP_ONE, b"all": CATCHUP_ALL}
CATCHUP_BY_VALUE = {v: k for k, v in CATCHUP_NAMES.items()}
MIN_EVERY_MS = 10
MAX_EVERY_MS = 366 * 86400 * 1000  # a year
MAX_CRON_LEN = 256

_HEAD = struct.Struct(">BBBQQQ")
_TAIL = struct.Struct(">HiIII")


class BadSpec(ValueError):
    """A schedule definition that cannot be used (the message says why)."""


class ScheduleSpec(NamedTuple):
    paused: bool
    catchup: int  # CATCHUP_*: what runs missed while the whole cluster was down become
    every_ms: int  # 0 for a cron schedule
    anchor: int  # ms: the origin of an interval schedule's runs
    since: int  # ms: only runs after this time are owed
    cron: bytes  # b"" for an interval schedule
    tz: bytes  # b"" = UTC
    queue: bytes
    body: bytes
    repl: int
    retry: int
    ttl: int
    delay: int
    maxlen: int
    opts: object  # JobOptions or None

    def describe(self) -> bytes:
        """When it fires, as SCHEDULE LIST and SHOW say it."""
        if self.every_ms:
            return b"every %d ms" % self.every_ms
        return b"cron %s %s" % (self.cron, self.tz or b"UTC")


def encode_spec(spec: ScheduleSpec) -> bytes:
    opts = _options.encode(spec.opts)
    return b"".join((
        _HEAD.pack(SPEC_VERSION, 1 if spec.paused else 0, spec.catchup, spec.every_ms, spec.anchor, spec.since),
        struct.pack(">H", len(spec.cron)), spec.cron, struct.pack(">H", len(spec.tz)), spec.tz,
        struct.pack(">I", len(spec.queue)), spec.queue, struct.pack(">I", len(spec.body)), spec.body,
        _TAIL.pack(spec.repl, spec.retry, spec.ttl, spec.delay, spec.maxlen),
        struct.pack(">I", len(opts)), opts))


def decode_spec(data: bytes) -> ScheduleSpec:
    """The spec :func:`encode_spec` made; raises :class:`BadSpec`."""
    try:
        version, paused, catchup, every_ms, anchor, since = _HEAD.unpack_from(data, 0)
        if version != SPEC_VERSION:
            raise BadSpec("unknown schedule version %d" % version)
        pos = _HEAD.size
        fields = []
        for fmt in (">H", ">H", ">I", ">I"):
            (n,) = struct.unpack_from(fmt, data, pos)
            pos += struct.calcsize(fmt)
            fields.append(bytes(data[pos:pos + n]))
            if len(fields[-1]) != n:
                raise BadSpec("truncated schedule")
            pos += n
        repl, retry, ttl, delay, maxlen = _TAIL.unpack_from(data, pos)
        pos += _TAIL.size
        (n,) = struct.unpack_from(">I", data, pos)
        raw = bytes(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    except struct.error:
        raise BadSpec("truncated schedule") from None
    if pos != len(data) or len(raw) != n:
        raise BadSpec("schedule of a bad length")
    try:
        opts, end = _options.decode(raw, 0)
    except _options.BadOptions as e:
        raise BadSpec("bad job options: %s" % e) from None
    if end != len(raw):
        raise BadSpec("bad job options: trailing bytes")
    cron, tz, queue, body = fields
    spec = ScheduleSpec(bool(paused), catchup, every_ms, anchor, since, cron, tz, queue, body,
                        repl, retry, ttl, delay, maxlen, opts)
    check(spec)
    return spec


def check(spec: ScheduleSpec) -> None:
    """Raise :class:`BadSpec` unless ``spec`` can be used (the invariants
    in the module docstring)."""
    if spec.catchup not in CATCHUP_BY_VALUE:
        raise BadSpec("unknown catch-up policy")
    if bool(spec.every_ms) == bool(spec.cron):
        raise BadSpec("a schedule fires either by CRON or EVERY")
    if spec.every_ms and not MIN_EVERY_MS <= spec.every_ms <= MAX_EVERY_MS:
        raise BadSpec("EVERY must be between %d and %d milliseconds" % (MIN_EVERY_MS, MAX_EVERY_MS))
    if spec.cron:
        cron_error = check_cron(spec.cron, spec.tz)
        if cron_error:
            raise BadSpec(cron_error)
    elif spec.tz:
        raise BadSpec("TZ goes with CRON")
    if not spec.queue:
        raise BadSpec("the queue name is empty")
    if not 0 < spec.ttl <= MAX_JOB_SECONDS or not 0 <= spec.delay < spec.ttl \
            or not -1 <= spec.retry <= MAX_JOB_SECONDS:
        raise BadSpec("TTL, DELAY or RETRY out of bounds")


def _zone(tz: bytes):
    if not tz:
        return timezone.utc
    from zoneinfo import ZoneInfo  # (3.9+; the tzdata package when the system has no zone files)
    try:
        return ZoneInfo(tz.decode("ascii"))
    except (ValueError, LookupError, OSError, UnicodeDecodeError):
        return None


def check_cron(cron: bytes, tz: bytes):
    """None if ``cron`` (5 fields, or 6 with seconds first) parses in zone
    ``tz``, else what is wrong."""
    if len(cron) > MAX_CRON_LEN:
        return "CRON expression too long"
    try:
        text = cron.decode("ascii")
    except UnicodeDecodeError:
        return "CRON expression is not ASCII"
    if len(text.split()) not in (5, 6):
        return "CRON needs 5 fields (minute hour day month weekday), or 6 with seconds first"
    if _zone(tz) is None:
        return "unknown time zone"
    from croniter import croniter  # here: a node without cron schedules never imports it (0.14 s)
    if not croniter.is_valid(text, second_at_beginning=True):
        return "invalid CRON expression"
    return None


def next_fire(spec: ScheduleSpec, after_ms: int) -> int:
    """The first run of ``spec`` strictly after ``after_ms`` and after
    ``since`` (ms)."""
    after_ms = max(after_ms, spec.since)
    if spec.every_ms:
        k = (after_ms - spec.anchor) // spec.every_ms + 1 if after_ms >= spec.anchor else 1
        return spec.anchor + k * spec.every_ms
    from croniter import croniter
    start = datetime.fromtimestamp(after_ms / 1000, _zone(spec.tz))
    it = croniter(spec.cron.decode("ascii"), start, second_at_beginning=True)
    t = int(round(it.get_next(float) * 1000))
    while t <= after_ms:  # (a float's rounding may land on after_ms itself)
        t = int(round(it.get_next(float) * 1000))
    return t


def fire_times(spec: ScheduleSpec, after_ms: int, until_ms: int, limit: int) -> list:
    """Up to ``limit`` runs in ``(after_ms, until_ms]``, oldest first."""
    out = []
    t = next_fire(spec, after_ms)
    while t <= until_ms and len(out) < limit:
        out.append(t)
        t = next_fire(spec, t)
    return out
