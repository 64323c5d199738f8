"""The job record and its states.

A ``Job`` is the per-job object a node keeps; it is the largest thing in
memory, so it has ``__slots__`` and no per-job containers unless needed:
``delivered`` is a tuple of node IDs (one shared tuple for the common
single-copy case) and ``confirmed`` is ``None`` outside replication / GC.

The queue name, REPLICATE and RETRY (given at ADDJOB, never changed) and the
fields most jobs never change from their defaults (``delay``, ``nacks``,
``deliv``, ``gc_retry``, ``confirmed``, ``dedup``) live out of line in a
:class:`JobExtra`.  The jobs of one queue with the same REPLICATE and RETRY
that keep the defaults share one record; a job gets a copy of its own the
first time one of the others is set to anything else.  They read and write
as plain attributes of the job (properties), so no caller knows the
difference; hot paths read ``job.extra.<field>`` instead (two slot loads,
no property call).  A job of the common kind has 10 slots instead of 18 (and on PyPy,
which keeps integer attributes unboxed in an array of their own, four
object references: the number an instance holds without a second array).

Times are integers in milliseconds of the node's clock, except ``ctime``
which follows the original: ``creation_ms * 1_000_000 + counter`` so that jobs
created in the same millisecond on one node still sort in creation order.
``qtime == 0`` means "never queue again" (at-most-once jobs once queued).
"""

import sys
from operator import attrgetter

# ADDJOB's extensions (docs/extensions.md): JobOptions, kept in JobExtra.opts
# (the PRIORITY range is re-exported for the callers that import it here).
from . import limits, options as _options
from .limits import PRIORITY_DEFAULT, PRIORITY_MAX, PRIORITY_MIN
from .options import BadOptions, JobOptions  # noqa: F401

WAIT_REPL = 0
ACTIVE = 1
QUEUED = 2
ACKED = 3

STATE_NAMES = (b"wait-repl", b"active", b"queued", b"acked")
STATE_BY_NAME = {name: i for i, name in enumerate(STATE_NAMES)}

# Flags.
#: Largest TTL, DELAY or RETRY (seconds): defined in :mod:`.limits`, named
#: here too.
MAX_JOB_SECONDS = limits.MAX_JOB_SECONDS
#: Largest NACK / additional-deliveries counter a record may carry.
MAX_JOB_COUNTER = 1 << 62

F_BCAST_QUEUED = 1  # the next enqueue is a re-queue: broadcast QUEUED
F_BCAST_WILLQUEUE = 2  # wake up 500 ms before qtime to send WILLQUEUE
F_DELIVERED = 4  # served to a client at least once by this node
F_EXTREPL = 8  # created here without a local copy (leaving / low memory)
F_LOADED = 16  # loaded from the AOF: no WILLQUEUE before the other copies can answer it
F_NACK_DELAYED = 32  # NACKed with a delay (counted then): the requeue at qtime counts nothing
F_LIMIT_SLOT = 64  # delivered here under a concurrency limit, still in flight (disque.core.qlimits)

WILLQUEUE_ADVANCE = 500  # ms before qtime when WILLQUEUE is sent
LOADED_RECHECK = 100  # ms between looks at the links of a loaded job's copies
DEFAULT_RETRY_MAX = 300  # s, cap of the default RETRY (TTL/10)
DEFAULT_TTL = 86400  # s


class JobExtra:
    """A job's queue name, its REPLICATE and RETRY (fixed at ADDJOB and the
    same for most jobs of a queue), and the fields most jobs leave at their
    defaults (see the module docstring).

    Invariant: a ``shared`` record holds the defaults, for every job of its
    queue, REPLICATE, RETRY and options that kept them (one per such key while
    jobs use it, see :meth:`disque.core.queues.Queues.job_defaults`); it is
    never written: a job's first write of anything but a default gives it
    a copy of its own."""

    __slots__ = ("queue", "repl", "retry", "opts", "delay", "nacks", "deliv", "gc_retry", "confirmed", "dedup",
                 "shared", "__weakref__")

    def __init__(self, queue, repl, retry, shared=False, opts=None):
        self.queue = queue  # the queue name (bytes)
        self.opts = opts  # JobOptions, or None: fixed at ADDJOB like repl and retry
        self.repl = repl  # REPLICATE: copies wanted
        self.retry = retry  # RETRY, seconds (0: at most once)
        self.delay = 0  # DELAY, seconds (only for the record: it has passed once queued)
        self.nacks = 0  # NACKs received
        self.deliv = 0  # additional deliveries
        self.gc_retry = 0  # acknowledged: collection attempts so far
        self.confirmed = None  # set of node IDs: copies confirmed (replication, GC)
        self.dedup = None  # the client's DEDUP key (bytes), see disque.core.dedup
        self.shared = shared

    def copy(self):
        """A record of one's own with the same values (not shared)."""
        new = JobExtra(self.queue, self.repl, self.retry, opts=self.opts)
        new.delay, new.nacks, new.deliv = self.delay, self.nacks, self.deliv
        new.gc_retry, new.confirmed, new.dedup = self.gc_retry, self.confirmed, self.dedup
        return new

    def at_defaults(self) -> bool:
        """True when every field but ``queue``, ``repl``, ``retry`` and
        ``opts`` holds its default."""
        return not (self.delay or self.nacks or self.deliv or self.gc_retry) \
            and self.confirmed is None and self.dedup is None


def _via_extra(name, read):
    """The reader of ``job.extra.<name>``: on CPython a C-level
    ``attrgetter``; on PyPy, whose ``attrgetter`` of a dotted name is
    Python code (4 to 8 times slower there than a plain function the JIT
    inlines), ``read``, that function."""
    if sys.implementation.name == "pypy":
        return read
    return attrgetter("extra." + name)


def _extra_field(name, default, read):
    """A job attribute kept in its ``JobExtra``.  Reading costs one C-level
    ``attrgetter`` (``read`` on PyPy: see :func:`_via_extra`); the first
    write of anything but the default to a job on its queue's shared record
    gives the job a copy of its own, and writing the default there changes
    nothing."""

    def set_(job, value):
        extra = job.extra
        if extra.shared:
            if value is default or (value is not None and value == default):
                return
            extra = job.extra = extra.copy()
        setattr(extra, name, value)

    return property(_via_extra(name, read), set_, doc="JobExtra.%s (default %r)" % (name, default))


class Job:
    __slots__ = (
        "id",
        "body",
        "state",
        "flags",
        "ctime",
        "etime",
        "qtime",
        "awake",
        "delivered",
        "extra",
    )

    def __init__(self, job_id, queue, body, state, repl, ctime, etime, delay, retry, qtime, shared=None):
        """``shared``: the shared JobExtra of ``queue``, ``repl`` and
        ``retry`` (which then are its own: ``shared.queue`` ...); without it
        the job gets a record of its own."""
        self.id = job_id
        self.body = body
        self.state = state
        self.flags = 0
        self.ctime = ctime
        self.etime = etime
        self.qtime = qtime
        self.awake = 0
        self.delivered = ()
        self.extra = shared if shared is not None else JobExtra(queue, repl, retry)
        if delay:
            self.delay = delay

    queue = property(_via_extra("queue", lambda job: job.extra.queue),
                     doc="The queue name (JobExtra.queue; never changes).")
    repl = property(_via_extra("repl", lambda job: job.extra.repl), doc="REPLICATE (JobExtra.repl; never changes).")
    retry = property(_via_extra("retry", lambda job: job.extra.retry),
                     doc="RETRY in seconds (JobExtra.retry; never changes).")
    opts = property(_via_extra("opts", lambda job: job.extra.opts),
                    doc="JobOptions or None (JobExtra.opts; never changes).")
    delay = _extra_field("delay", 0, lambda job: job.extra.delay)
    nacks = _extra_field("nacks", 0, lambda job: job.extra.nacks)
    deliv = _extra_field("deliv", 0, lambda job: job.extra.deliv)
    gc_retry = _extra_field("gc_retry", 0, lambda job: job.extra.gc_retry)
    confirmed = _extra_field("confirmed", None, lambda job: job.extra.confirmed)
    dedup = _extra_field("dedup", None, lambda job: job.extra.dedup)

    @property
    def priority(self) -> int:
        opts = self.extra.opts
        return PRIORITY_DEFAULT if opts is None else opts.priority

    def created_ms(self) -> int:
        return self.ctime // 1_000_000

    def merge_delivered(self, node_ids) -> None:
        """Nodes that showed they have a copy join ``delivered`` (in order,
        once each), so QUEUED, SETACK and DELJOB reach them too."""
        merged = tuple(dict.fromkeys((*self.delivered, *node_ids)))
        if merged != self.delivered:
            self.delivered = merged

    def __repr__(self):
        return "<Job %s %s q=%r>" % (
            self.id.decode("ascii", "replace"),
            STATE_NAMES[self.state].decode(),
            self.queue,
        )


def default_retry(ttl: int) -> int:
    """RETRY when not given: TTL/10, at most 5 minutes, at least 1 second."""
    retry = ttl // 10
    if retry > DEFAULT_RETRY_MAX:
        retry = DEFAULT_RETRY_MAX
    return retry or 1


DEFAULT_TTL_RETRY = default_retry(DEFAULT_TTL)  # the common case, precomputed


# -- storage serialization (AOF LOADJOB records) --------------------------------
#
#   version:u8  state:u8  repl:u16  ctime:i64  etime:i64  delay:i64  retry:i64
#   qtime:i64  nacks:i64  deliv:i64  id:40  queue:u32+bytes  body:u32+bytes
#   delivered: u16 count + 40 bytes each
#   version 2 only (a job with a DEDUP key): key: u16+bytes
#   version 4 only (a job with JobOptions or a delayed NACK): key: u16+bytes
#   (empty: none), the options (disque.core.options), ext_flags:u8 (bit 0:
#   F_NACK_DELAYED, its requeue time being ``qtime``)
#   version 3 (read, no longer written: PRIORITY only, as the first version
#   with priorities wrote it): key: u16+bytes (empty: none), priority:u8
#
# Jobs without a key are written as version 1, byte for byte as before the
# key existed, so files of either kind load in both directions but for keys;
# only jobs that use an extension (docs/extensions.md) are written as
# version 4, which an older node refuses to load.
# Absolute times in ms of the writing node's clock.  ``state`` matters only
# for a controlled restart (queued jobs are queued again); otherwise loaded
# jobs come back active and wait for their requeue time.

import struct as _struct

_STORE_VERSION = 1
_STORE_VERSION_DEDUP = 2
_STORE_VERSION_PRIORITY = 3
_STORE_VERSION_OPTS = 4
_STORE_HEAD = _struct.Struct(">BBHqqqqqqq40s")


class BadRecord(ValueError):
    """A LOADJOB payload that cannot be a job of this format."""


_U32 = _struct.Struct(">I").pack
_U16 = _struct.Struct(">H").pack


def serialize(job) -> bytes:
    """The record of ``job`` (the format above).  It writes one per job the
    AOF is told of: the fields kept in the ``JobExtra`` are read from it
    once, not through eight properties."""
    extra = job.extra
    queue = extra.queue or b""
    body = job.body or b""
    key = extra.dedup
    opts = extra.opts
    version = _STORE_VERSION if key is None else _STORE_VERSION_DEDUP
    nack_delayed = job.flags & F_NACK_DELAYED
    if opts is not None or nack_delayed:
        version = _STORE_VERSION_OPTS
    head = _STORE_HEAD.pack(version, job.state, extra.repl, job.ctime, job.etime, extra.delay, extra.retry,
                            job.qtime, extra.nacks, extra.deliv, job.id)
    delivered = job.delivered
    parts = [head, _U32(len(queue)), queue, _U32(len(body)), body, _U16(len(delivered)), *delivered]
    if version == _STORE_VERSION_DEDUP:
        parts += (_U16(len(key)), key)
    elif version == _STORE_VERSION_OPTS:
        key = key or b""
        parts += (_U16(len(key)), key, _options.encode(opts), b"\x01" if nack_delayed else b"\x00")
    return b"".join(parts)


def deserialize(data: bytes):
    """A Job from :func:`serialize` output; raises BadRecord."""
    try:
        (version, state, repl, ctime, etime, delay, retry, qtime, nacks, deliv,
         job_id) = _STORE_HEAD.unpack_from(data, 0)
        if not _STORE_VERSION <= version <= _STORE_VERSION_OPTS or state > ACKED:
            raise BadRecord("unknown record version or state")
        pos = _STORE_HEAD.size
        (n,) = _struct.unpack_from(">I", data, pos)
        queue = data[pos + 4:pos + 4 + n]
        pos += 4 + n
        (n,) = _struct.unpack_from(">I", data, pos)
        body = data[pos + 4:pos + 4 + n]
        pos += 4 + n
        (count,) = _struct.unpack_from(">H", data, pos)
        pos += 2
        delivered = tuple(data[pos + 40 * i:pos + 40 * (i + 1)] for i in range(count))
        pos += 40 * count
        key = opts = None
        if version >= _STORE_VERSION_DEDUP:
            (n,) = _struct.unpack_from(">H", data, pos)
            key = data[pos + 2:pos + 2 + n]
            pos += 2 + n
            if len(key) != n or not key and version == _STORE_VERSION_DEDUP:
                raise BadRecord("bad dedup key")
            key = key or None
        ext_flags = 0
        if version == _STORE_VERSION_PRIORITY:
            (priority,) = _struct.unpack_from(">B", data, pos)
            pos += 1
            opts = _options.make(priority)
            if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
                raise BadRecord("bad priority")
        elif version == _STORE_VERSION_OPTS:
            opts, pos = _options.decode(data, pos)
            (ext_flags,) = _struct.unpack_from(">B", data, pos)
            pos += 1
            if ext_flags > 1:
                raise BadRecord("bad flags")
    except _struct.error as e:
        raise BadRecord(str(e)) from None
    except BadOptions as e:
        raise BadRecord(str(e)) from None
    if pos != len(data) or len(queue) < 0 or any(len(d) != 40 for d in delivered):
        raise BadRecord("bad lengths")
    job = Job(job_id, queue, body, state, repl, ctime, etime, delay, retry, qtime)
    job.extra.opts = opts  # (its own record: share_defaults finds the shared one at load)
    job.nacks = nacks
    job.deliv = deliv
    job.delivered = delivered
    job.dedup = key
    if ext_flags:
        job.flags = F_NACK_DELAYED
    return job
