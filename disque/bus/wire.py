"""Cluster bus wire format: versioned, size-checked, sans-IO.

Framing is a 4-byte big-endian length prefix (``Int32StringReceiver``), then::

    frame   = "DQ" version:u8 type:u8 header body
    header  = sender:40 port:u16 flags:u16 host:str8
    body    = the fields of the message type, in declaration order

Field encodings: ``id`` is exactly 40 bytes; ``str8``/``str32`` are a u8 or
u32 length then bytes; integers are big-endian (``u8``, ``u16``, ``u32``,
``i64``); ``bool`` is a u8 0 or 1; ``ids`` is a u16 count of ``id``;
``gossip`` a u16 count of (id, str8 host, u16 port, u8 flags); ``job`` a job
record; ``jobs`` a u32 count of job records.

Version 2 (DEDUP keys) adds two fields at the end: a job record's
``dedup`` key (str16, empty for none) and DELJOB's ``void`` flag (bool).
Version 3 (the extensions of docs/extensions.md) adds a job record's
options at its end (the layout of ``disque.core.options``: a single 0 byte
for a job without options) and the message NACKDELAY (``id``, ``until``
u64 ms, ``count`` bool), which no version 2 frame can carry.

Version 4 (the dashboard's cluster view, docs/observability.md) adds two
messages and changes none: COUNTSASK (``token`` u32, ``limit`` u32,
``wanted`` str32, ``all_queues`` bool, ``patterns`` a u16 count of str16)
and COUNTS (``token`` u32, ``jobs`` u64, ``queued`` u64, ``total`` u32,
``matching`` u32, ``queues`` a u32 count of (name str32, len, added,
removed, acked, nacked, moved in, moved out: u64 each, paused u8),
``http_port`` u16, ``http_tls`` bool, ``http_bind`` str8).

Version 5 adds GOTJOBS (``ids``: several GOTJOBs in one message) and
REPLJOBS (``jobs``: several REPLJOBs in one message) and changes nothing
else.

Version 6 (the catalog: schedules and queue limits, docs/extensions.md)
adds SETTINGS (a u32 count of catalog entries, each a str32 in the one
encoding of ``disque.core.catalog``, then ``mode`` u8: 0 to 2), SETTINGSSUM
(a 20-byte digest) and QDEMAND (a u32 count of queues, each a str32 name,
``demand`` u32 and ``inflight`` u32: the queue limits' split), and
changes nothing else.

A frame is written in the version its receiver reads: SETTINGS,
SETTINGSSUM and QDEMAND in version 6 to a peer whose frames carry ``H_SETTINGS`` (and
never to another), GOTJOBS and REPLJOBS
in version 5 to a peer whose frames carry the ``H_BATCHES`` header flag
(and never to another), COUNTSASK and
COUNTS in version 4 to a peer whose frames carry the ``H_COUNTS`` header
flag (and never to another), job records in version 3 to a peer whose
frames carry ``H_EXTENSIONS``, everything else in version 2 (job options
left out), which is how nodes of the previous versions keep
their links during a rolling upgrade.  Older frames still decode, with an
empty key, ``void`` false and no options.

:func:`decode` checks everything: magic, version, known type, every length
against what is left of the frame, no trailing bytes, job IDs of the right
size, counts against ``MAX_*``, a job record's DELAY and RETRY within
what ADDJOB accepts and its counters non-negative.  Any violation raises :class:`WireError`;
the bus protocol then drops the link (a peer speaking another version or
garbage is not a peer).  Versions: a receiver accepts frames whose version
is at most its own and refuses newer ones; a sender never writes a version
its receiver did not announce.
"""

import struct

from ..core import messages
from ..core import options
from ..core.catalog import BadEntry, check, decode_entry, encode_entry
from ..core.job import MAX_JOB_COUNTER
from ..core.limits import MAX_JOB_SECONDS

VERSION = 6
SETTINGS = 6  # the version of SETTINGS, SETTINGSSUM and QDEMAND (H_SETTINGS)
BATCHES = 5  # the version of REPLJOBS and GOTJOBS (H_BATCHES)
EXTENSIONS = 3  # the version of job options and NACKDELAY (H_EXTENSIONS)
OLDEST_PEER = 2  # the version written to a peer that did not announce H_EXTENSIONS
MAGIC = b"DQ"
ID_LEN = 40
MAX_GOSSIP = 1024
MAX_IDS = 65535
MAX_JOBS = 100_000
MAX_PATTERNS = 1024  # a user's queue patterns in a COUNTSASK
MAX_COUNTS = 10_000  # queues in a COUNTS answer
MAX_ENTRIES = 4096  # catalog entries in a SETTINGS message
MAX_DEMANDS = 4096  # queues in a QDEMAND message
DIGEST_LEN = 20  # a SETTINGSSUM's digest (SHA-1)

_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_PREAMBLE = struct.Struct(">2sBB40sHHB")  # magic, version, type, sender, port, flags, host len
_JOB_NUMS = struct.Struct(">Hqqqqqq")  # repl, ctime, etime, delay, retry, nacks, deliv
_QUEUE_NUMS = struct.Struct(">QQQQQQQB")  # a QueueCount's len ... moved_out, paused
_COUNTS_HEAD = struct.Struct(">IQQII")  # token, jobs, queued, total, matching


class WireError(ValueError):
    """A frame that is not a valid message of this protocol version."""


# -- field codecs --------------------------------------------------------------

def _put_id(out, value):
    if len(value) != ID_LEN:
        raise WireError("bad id length %d" % len(value))
    out.append(value)


def _put_str8(out, value):
    if len(value) > 255:
        raise WireError("string too long for str8")
    out.append(_U8.pack(len(value)))
    out.append(value)


def _put_str32(out, value):
    out.append(_U32.pack(len(value)))
    out.append(value)


def _put_ids(out, values):
    if len(values) > MAX_IDS:
        raise WireError("too many ids")
    out.append(_U16.pack(len(values)))
    for v in values:
        _put_id(out, v)


def _put_job(out, job, version):
    """One job record (REPLJOB, REPLJOBS, YOURJOBS): every field checked
    as its own encoder would, appended in one ``extend``."""
    job_id, queue, body, delivered, key = job.id, job.queue, job.body, job.delivered, job.dedup
    if len(job_id) != ID_LEN:
        raise WireError("bad id length %d" % len(job_id))
    if len(delivered) > MAX_IDS:
        raise WireError("too many ids")
    for node_id in delivered:
        if len(node_id) != ID_LEN:
            raise WireError("bad id length %d" % len(node_id))
    if len(key) > 65535:
        raise WireError("dedup key too long")
    out.extend((job_id, _U32.pack(len(queue)), queue, _U32.pack(len(body)), body,
                _JOB_NUMS.pack(job.repl, job.ctime, job.etime, job.delay, job.retry, job.nacks, job.deliv),
                _U16.pack(len(delivered))))
    out.extend(delivered)
    out.append(_U16.pack(len(key)))
    out.append(key)
    opts = job.opts
    if version >= 3:
        if opts is None:
            out.append(b"\x00")  # options.encode(None)
            return
        try:
            out.append(options.encode(opts))
        except (options.BadOptions, struct.error) as e:
            raise WireError("job options: %s" % e) from None
    elif opts is not None:  # (the core never hands such a job to an older peer)
        raise WireError("job options need bus version 3")


class _Reader:
    __slots__ = ("data", "pos", "end", "version")

    def __init__(self, data, pos, version=VERSION):
        self.data = data
        self.pos = pos
        self.end = len(data)
        self.version = version

    def take(self, n):
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise WireError("truncated frame")
        self.pos = pos + n
        return self.data[pos:pos + n]

    def unpack(self, st):
        pos = self.pos
        if pos + st.size > self.end:
            raise WireError("truncated frame")
        self.pos = pos + st.size
        return st.unpack_from(self.data, pos)

    def u8(self):
        return self.unpack(_U8)[0]

    def u16(self):
        return self.unpack(_U16)[0]

    def u32(self):
        return self.unpack(_U32)[0]

    def i64(self):
        return self.unpack(_I64)[0]

    def id(self):
        return self.take(ID_LEN)

    def str8(self):
        return self.take(self.u8())

    def str32(self):
        return self.take(self.u32())

    def bool(self):
        v = self.u8()
        if v > 1:
            raise WireError("bad bool")
        return v == 1

    def ids(self):
        return tuple(self.id() for _ in range(self.u16()))

    def job(self):
        """One job record (every REPLJOB, YOURJOBS' records): in one pass
        over local offsets rather than a method call per field, with the
        same checks (each length against what is left of the frame)."""
        data, pos, end = self.data, self.pos, self.end
        if pos + ID_LEN + 4 > end:
            raise WireError("truncated frame")
        job_id = data[pos:pos + ID_LEN]
        pos += ID_LEN + 4
        n = _U32.unpack_from(data, pos - 4)[0]
        queue = data[pos:pos + n]
        pos += n + 4
        if pos > end:
            raise WireError("truncated frame")
        n = _U32.unpack_from(data, pos - 4)[0]
        body = data[pos:pos + n]
        pos += n
        if pos + _JOB_NUMS.size + 2 > end:
            raise WireError("truncated frame")
        repl, ctime, etime, delay, retry, nacks, deliv = _JOB_NUMS.unpack_from(data, pos)
        if not (0 <= delay <= MAX_JOB_SECONDS and 0 <= retry <= MAX_JOB_SECONDS
                and 0 <= nacks <= MAX_JOB_COUNTER and 0 <= deliv <= MAX_JOB_COUNTER):
            raise WireError("job field out of range")
        pos += _JOB_NUMS.size + 2
        n = _U16.unpack_from(data, pos - 2)[0]
        if pos + n * ID_LEN > end:
            raise WireError("truncated frame")
        delivered = tuple([data[i:i + ID_LEN] for i in range(pos, pos + n * ID_LEN, ID_LEN)])
        pos += n * ID_LEN
        key = b""
        if self.version >= 2:
            if pos + 2 > end:
                raise WireError("truncated frame")
            n = _U16.unpack_from(data, pos)[0]
            pos += 2 + n
            if pos > end:
                raise WireError("truncated frame")
            key = data[pos - n:pos]
        opts = None
        if self.version >= 3:
            try:
                opts, pos = options.decode(data, pos)
            except options.BadOptions as e:
                raise WireError("job options: %s" % e) from None
            if pos > end:
                raise WireError("truncated frame")
        self.pos = pos
        return messages.JobRecord(job_id, queue, body, repl, ctime, etime, delay, retry, nacks, deliv, delivered, key,
                                  opts)

    def gossip(self):
        n = self.u16()
        if n > MAX_GOSSIP:
            raise WireError("too many gossip entries")
        return tuple(messages.Gossip(self.id(), self.str8(), self.u16(), self.u8()) for _ in range(n))


def _put_gossip(out, entries):
    if len(entries) > MAX_GOSSIP:
        raise WireError("too many gossip entries")
    out.append(_U16.pack(len(entries)))
    for g in entries:
        _put_id(out, g.node_id)
        _put_str8(out, g.host)
        out.append(struct.pack(">HB", g.port, g.flags))


# -- per type: (encode(out, msg), decode(reader) -> msg) ----------------------

def _one_id(cls):
    return (lambda out, m, v: _put_id(out, m[0]), lambda r: cls(r.id()))


def _gossip_msg(cls):
    return (lambda out, m, v: _put_gossip(out, m.gossip), lambda r: cls(r.gossip()))


def _counter(value):
    if value > messages.COUNT_NACK:
        raise WireError("bad QUEUED counter")
    return value


def _put_jobs(out, jobs, version):
    if len(jobs) > MAX_JOBS:
        raise WireError("too many jobs")
    out.append(_U32.pack(len(jobs)))
    for j in jobs:
        _put_job(out, j, version)


def _get_jobs(cls):
    def get(r):
        n = r.u32()
        if n > MAX_JOBS:
            raise WireError("too many jobs")
        return cls(tuple(r.job() for _ in range(n)))
    return get


def _put_ask(out, m, version):
    if len(m.patterns) > MAX_PATTERNS:
        raise WireError("too many patterns")
    out.append(_U32.pack(m.token))
    out.append(_U32.pack(m.limit))
    _put_str32(out, m.wanted)
    out.append(_U8.pack(1 if m.all_queues else 0))
    out.append(_U16.pack(len(m.patterns)))
    for p in m.patterns:
        if len(p) > 65535:
            raise WireError("pattern too long")
        out.append(_U16.pack(len(p)))
        out.append(p)


def _get_ask(r):
    token, limit, wanted, all_queues = r.u32(), r.u32(), r.str32(), r.bool()
    n = r.u16()
    if n > MAX_PATTERNS:
        raise WireError("too many patterns")
    return messages.CountsAsk(token, limit, wanted, all_queues, tuple(r.take(r.u16()) for _ in range(n)))


def _put_counts(out, m, version):
    if len(m.queues) > MAX_COUNTS:
        raise WireError("too many queues")
    try:
        out.append(_COUNTS_HEAD.pack(m.token, m.jobs, m.queued, m.total, m.matching))
        out.append(_U32.pack(len(m.queues)))
        for q in m.queues:
            _put_str32(out, q.name)
            out.append(_QUEUE_NUMS.pack(*q[1:]))
        out.append(_U16.pack(m.http_port))
    except (struct.error, ValueError, OverflowError) as e:  # (PyPy: ValueError for a negative)
        raise WireError("counts: %s" % e) from None
    out.append(_U8.pack(1 if m.http_tls else 0))
    _put_str8(out, m.http_bind)


def _get_counts(r):
    token, jobs, queued, total, matching = r.unpack(_COUNTS_HEAD)
    n = r.u32()
    if n > MAX_COUNTS:
        raise WireError("too many queues")
    queues = tuple(messages.QueueCount(r.str32(), *r.unpack(_QUEUE_NUMS)) for _ in range(n))
    return messages.Counts(token, jobs, queued, total, matching, queues, r.u16(), r.bool(), r.str8())


def _put_settings(out, m, version):
    if len(m.entries) > MAX_ENTRIES:
        raise WireError("too many catalog entries")
    if not messages.SETTINGS_PUSH <= m.mode <= messages.SETTINGS_ANSWER:
        raise WireError("settings: unknown mode %d" % m.mode)
    out.append(_U32.pack(len(m.entries)))
    try:
        for entry in m.entries:
            check(entry)
            _put_str32(out, encode_entry(entry))
    except (BadEntry, struct.error) as e:
        raise WireError("settings: %s" % e) from None
    out.append(_U8.pack(m.mode))


def _get_settings(r):
    n = r.u32()
    if n > MAX_ENTRIES:
        raise WireError("too many catalog entries")
    try:
        entries = tuple(decode_entry(bytes(r.str32())) for _ in range(n))
    except BadEntry as e:
        raise WireError("settings: %s" % e) from None
    mode = r.u8()
    if mode > messages.SETTINGS_ANSWER:
        raise WireError("settings: unknown mode %d" % mode)
    return messages.Settings(entries, mode)


def _put_sum(out, m, version):
    if len(m.digest) != DIGEST_LEN:
        raise WireError("bad catalog digest")
    out.append(m.digest)


_DEMAND_NUMS = struct.Struct(">II")


def _put_demand(out, m, version):
    if len(m.queues) > MAX_DEMANDS:
        raise WireError("too many queues")
    out.append(_U32.pack(len(m.queues)))
    try:
        for d in m.queues:
            _put_str32(out, d.queue)
            out.append(_DEMAND_NUMS.pack(d.demand, d.inflight))
    except (struct.error, ValueError, OverflowError) as e:  # (PyPy: ValueError for a negative)
        raise WireError("qdemand: %s" % e) from None


def _get_demand(r):
    n = r.u32()
    if n > MAX_DEMANDS:
        raise WireError("too many queues")
    return messages.QDemand(tuple(messages.QueueDemand(bytes(r.str32()), *r.unpack(_DEMAND_NUMS))
                                  for _ in range(n)))


_CODECS = {
    messages.Meet: _gossip_msg(messages.Meet),
    messages.Ping: _gossip_msg(messages.Ping),
    messages.Pong: _gossip_msg(messages.Pong),
    messages.Fail: _one_id(messages.Fail),
    messages.ReplJob: (lambda out, m, v: _put_job(out, m.job, v), lambda r: messages.ReplJob(r.job())),
    messages.GotJob: _one_id(messages.GotJob),
    messages.GotJobs: (lambda out, m, v: _put_ids(out, m.job_ids), lambda r: messages.GotJobs(r.ids())),
    messages.Enqueue: _one_id(messages.Enqueue),
    messages.WillQueue: _one_id(messages.WillQueue),
    messages.Queued: (lambda out, m, v: (_put_id(out, m.job_id), out.append(_U8.pack(m.counter))),
                      lambda r: messages.Queued(r.id(), _counter(r.u8()))),
    messages.Working: _one_id(messages.Working),
    messages.SetAck: (lambda out, m, v: (_put_id(out, m.job_id), out.append(_U32.pack(m.may_have))),
                      lambda r: messages.SetAck(r.id(), r.u32())),
    messages.GotAck: (lambda out, m, v: (_put_id(out, m.job_id), out.append(_U8.pack(1 if m.known else 0))),
                      lambda r: messages.GotAck(r.id(), r.bool())),
    messages.DelJob: (lambda out, m, v: (_put_id(out, m.job_id), out.append(_U8.pack(1 if m.void else 0))),
                      lambda r: messages.DelJob(r.id(), r.bool() if r.version >= 2 else False)),
    messages.NeedJobs: (lambda out, m, v: (_put_str32(out, m.queue), out.append(_U32.pack(m.count))),
                        lambda r: messages.NeedJobs(r.str32(), r.u32())),
    messages.YourJobs: (lambda out, m, v: _put_jobs(out, m.jobs, v), _get_jobs(messages.YourJobs)),
    messages.ReplJobs: (lambda out, m, v: _put_jobs(out, m.jobs, v), _get_jobs(messages.ReplJobs)),
    messages.NackDelay: (lambda out, m, v: (_put_id(out, m.job_id), out.append(_U64.pack(m.until)),
                                            out.append(_U8.pack(1 if m.count else 0))),
                         lambda r: messages.NackDelay(r.id(), r.unpack(_U64)[0], r.bool())),
    messages.Pause: (lambda out, m, v: (_put_str32(out, m.queue), out.append(_U8.pack(m.flags))),
                     lambda r: messages.Pause(r.str32(), r.u8())),
    messages.CountsAsk: (_put_ask, _get_ask),
    messages.Counts: (_put_counts, _get_counts),
    messages.Settings: (_put_settings, _get_settings),
    messages.SettingsSum: (_put_sum, lambda r: messages.SettingsSum(bytes(r.take(DIGEST_LEN)))),
    messages.QDemand: (_put_demand, _get_demand),
}
#: Messages that older versions do not know (never written to their nodes).
FIRST_VERSION = {messages.NackDelay: EXTENSIONS, messages.CountsAsk: 4, messages.Counts: 4,
                 messages.GotJobs: BATCHES, messages.ReplJobs: BATCHES,
                 messages.Settings: SETTINGS, messages.SettingsSum: SETTINGS, messages.QDemand: SETTINGS}
_CODE_OF = {cls: code for code, cls in messages.TYPES}
_CLASS_OF = {code: cls for code, cls in messages.TYPES}
assert set(_CODECS) == set(_CODE_OF)


def encode(header: messages.Header, msg, version: int = VERSION) -> bytes:
    """The frame (without the length prefix) for ``msg`` sent by
    ``header``, in ``version`` (2 to 6: what the receiver reads)."""
    cls = type(msg)
    out = _head(header, cls, version)
    _CODECS[cls][0](out, msg, version)
    return b"".join(out)


def _head(header: messages.Header, cls, version: int) -> list:
    """The parts of a frame of type ``cls`` before its body: the preamble
    and the sender's host, every field checked."""
    code = _CODE_OF.get(cls)
    if code is None:
        raise WireError("not a bus message: %r" % (cls,))
    if len(header.sender) != ID_LEN:
        raise WireError("bad sender id")
    if len(header.host) > 255:
        raise WireError("host too long")
    if not OLDEST_PEER <= version <= VERSION:
        raise WireError("cannot write version %d" % version)
    if version < FIRST_VERSION.get(cls, 0):
        raise WireError("%s needs bus version %d" % (cls.__name__, FIRST_VERSION[cls]))
    return [_PREAMBLE.pack(MAGIC, version, code, header.sender, header.port, header.flags, len(header.host)),
            header.host]


def job_record(record: messages.JobRecord, version: int = VERSION) -> bytes:
    """One job record as REPLJOB, REPLJOBS and YOURJOBS carry it in
    ``version``: for :func:`encode_repljobs`, which joins records encoded
    once for several receivers."""
    out = []
    _put_job(out, record, version)
    return b"".join(out)


def encode_repljobs(header: messages.Header, records) -> bytes:
    """The REPLJOBS frame (version 5) of ``records``, job records already
    encoded by :func:`job_record` in version 5: the same bytes as
    ``encode(header, ReplJobs(...), 5)``."""
    if len(records) > MAX_JOBS:
        raise WireError("too many jobs")
    out = _head(header, messages.ReplJobs, BATCHES)
    out.append(_U32.pack(len(records)))
    out += records
    return b"".join(out)


def decode(frame: bytes):
    """``(Header, message)`` from one frame; raises WireError."""
    if len(frame) < _PREAMBLE.size:
        raise WireError("frame too short")
    magic, version, code, sender, port, flags, hostlen = _PREAMBLE.unpack_from(frame, 0)
    if magic != MAGIC:
        raise WireError("bad magic")
    if version == 0 or version > VERSION:
        raise WireError("unsupported version %d" % version)
    cls = _CLASS_OF.get(code)
    if cls is None or version < FIRST_VERSION.get(cls, 0):
        raise WireError("unknown message type %d" % code)
    r = _Reader(frame, _PREAMBLE.size, version)
    host = r.take(hostlen)
    msg = _CODECS[cls][1](r)
    if r.pos != r.end:
        raise WireError("trailing bytes")
    return messages.Header(bytes(sender), bytes(host), port, flags), msg
