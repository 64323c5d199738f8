"""The ``aof`` persistence: an append only file of job creations and
deletions ("Disque and disk persistence" in the spec).

Records are Redis-protocol commands, as in the original's AOF::

    LOADJOB <job record>     a job became known here (disque.core.job.serialize)
    DELJOB <id>              it is gone (acked, deleted, expired)
    CONTROLLED-RESTART       first record of a file written by SHUTDOWN
                             REWRITE-AOF: load it even with appendonly no,
                             and put queued jobs back in their queues

Writing: the core's ``Persist`` effects become records in a buffer that
:meth:`flush` writes with one ``os.write`` at the end of each reactor batch
(before replies leave, so an acknowledged ADDJOB is in the file).
``appendfsync always`` fsyncs there too; ``everysec`` fsyncs at most once a
second in a thread, off the reactor; ``no`` leaves it to the kernel.  With
``no-appendfsync-on-rewrite yes`` neither fsyncs while a rewrite runs.

Rewriting (BGREWRITEAOF, automatic rewrites) is incremental: a few thousand
jobs per reactor turn go to a temporary file while new records go both to
the live file and to a rewrite buffer, appended to the new file before it
atomically replaces the old one.  No child process, no long pause.  With
``aof-rewrite-incremental-fsync yes`` the new file is fsynced every
``REWRITE_FSYNC_BYTES`` written, so the final fsync has little left to do.

Loading reads the file in chunks, logs progress, repairs a truncated last
record (``aof-load-truncated yes``) and refuses a file corrupt in the middle
with the offset and the repair tool to use.  A small file (up to
``sync-load-max`` bytes, 1 MB: a tenth of a second) is loaded at once when
the node is built, before it listens; a bigger one is loaded by the service
in slices of a few milliseconds, one per reactor turn (:meth:`begin_load`),
while clients get ``-LOADING`` (see :mod:`disque.service`).  ``info()``
shows the progress of a load and of a rewrite (:func:`progress`: the rate
since the start and the time left at that rate).
"""

import math
import os
import time

from twisted.internet import threads
from zope.interface import implementer

from ..core.job import ACKED, BadRecord, WAIT_REPL, deserialize, serialize
from ..interfaces import IPersistence, LoadError
from ..logs import logger
from ..resp.codec import ProtocolError, RequestParser

log = logger("disque.aof")

CHUNK = 1 << 20
SYNC_LOAD_MAX = 1 << 20  # bytes: bigger files load in the reactor (aof:sync-load-max=...)
CLOCK_EVERY = 128  # records applied between two looks at the clocks while loading
REWRITE_STEP = 5000  # jobs written per reactor turn while rewriting (aof:rewrite-step=...)
REWRITE_FSYNC_BYTES = 32 * 1024 * 1024  # aof-rewrite-incremental-fsync: as the original
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


def _encoded_len(argv) -> int:
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
                        offset += _encoded_len(argv)
                        yield argv, offset
                    commands = parser.parse()
            except ProtocolError as e:
                raise AOFError("bad file format after offset %d: %s" % (offset, e.args[0].decode()),
                               offset)
            if on_progress is not None:
                on_progress(offset)
    yield None, offset


def progress(done, total, elapsed):
    """``(percent, rate, eta)`` of work of ``total`` units (bytes, jobs)
    with ``done`` done after ``elapsed`` seconds: the percentage (float,
    at most 100), the average rate since the start (units a second) and the
    whole seconds left at that rate, rounded up (0 only once done): 1 (a
    made-up figure, as Redis' ``loading_eta_seconds``) until some work and
    some time have gone by."""
    perc = min(100.0 * done / total, 100.0) if total > 0 else 100.0
    rate = done / elapsed if elapsed > 0 else 0.0
    if done >= total:
        eta = 0
    elif rate > 0:
        eta = int(math.ceil((total - done) / rate))
    else:
        eta = 1
    return perc, rate, eta


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


@implementer(IPersistence)
class AOFPersistence:
    """The ``aof`` strategy: one append only file in ``dir``.  ``clock``
    (tests): the wall clock progress is measured with (seconds)."""

    def __init__(self, config, reactor=None, rewrite_step=REWRITE_STEP, sync_load_max=SYNC_LOAD_MAX, clock=None):
        self.config = config
        self.reactor = reactor
        self.rewrite_step = rewrite_step
        self.sync_load_max = sync_load_max
        self.clock = clock or (lambda: time.time())
        self.path = os.path.join(config["dir"], config["appendfilename"])
        self.fd = None
        self.buf = []
        self.enabled = bool(config["appendonly"])
        self.last_fsync = 0.0
        self.fsync_pending = False
        self.size = 0
        self.base_size = 0  # size after the last rewrite (auto rewrite baseline)
        self.rewriting = None  # a Rewrite while in progress
        self.last_rewrite_time = -1
        self.last_rewrite_status = "ok"
        self.last_write_status = "ok"
        self.last_rewrite_pause_ms = 0
        self.loading = None  # a Load while in progress

    # -- loading -------------------------------------------------------------

    def load(self, node):
        """Load the file into ``node`` at once; returns the number of
        records applied.  Loads only when AOF is on, or for a controlled
        restart.  An unusable file raises AOFError (a LoadError) saying
        which file, what is wrong and how to repair it."""
        loading = self._start_load(node)
        if loading is None:
            return 0
        loading.step(float("inf"))
        return loading.records

    def begin_load(self, node):
        """Load a file of at most ``sync_load_max`` bytes at once and return
        None; return the ``step`` of the :class:`Load` of a bigger one (see
        IPersistence.begin_load)."""
        loading = self._start_load(node)
        if loading is None:
            return None
        if loading.total <= self.sync_load_max:
            loading.step(float("inf"))
            return None
        log.info("Loading the AOF in the background: {size} bytes", size=loading.total)
        return loading.step

    def _start_load(self, node):
        """A Load of the file into ``node``, or None when there is nothing
        to load (no file, or AOF off and no controlled restart)."""
        if not os.path.exists(self.path):
            if self.enabled:
                self._open()
            return None
        with open(self.path, "rb") as f:
            controlled = f.read(len(MARKER)) == MARKER
        if not (self.enabled or controlled or self.config["aof-enqueue-jobs-once"]):
            return None
        return Load(self, node, controlled)

    def _loaded(self, loading, good):
        """The records are applied (``good``: where the last whole one
        ends): the end of a load, as the original does it."""
        node = loading.node
        total = loading.total
        if good < total:
            if not self.config["aof-load-truncated"]:
                raise AOFError("the last record is truncated (%d of %d bytes are whole records); "
                               "run python -m disque.tools.check_aof --fix %s" % (good, total, self.path), good)
            log.warn("The AOF ends with a truncated record: dropping its last {n} bytes", n=total - good)
            with open(self.path, "r+b") as f:
                f.truncate(good)
        controlled = loading.controlled
        queued = node.jobs.finish_load(controlled or self.config["aof-enqueue-jobs-once"])
        log.info("AOF loaded: {n} records, {jobs} jobs ({queued} queued) in {t:.2f}s",
                 n=loading.records, jobs=len(node.jobs), queued=queued, t=self.clock() - loading.started)
        if self.config["aof-enqueue-jobs-once"]:
            self.config.set(b"aof-enqueue-jobs-once", b"no")  # once
        if controlled and not self.enabled:
            os.replace(self.path, self.path + ".loaded")  # never reload stale state after a crash
        elif self.enabled:
            self._open()
            if controlled:
                self.rewrite(node)  # drop the marker: the next start is a plain one

    def _load_error(self, e):
        """The AOFError to raise for ``e``: says which file and how to
        repair it."""
        text = str(e)
        if "check_aof" not in text:
            text += "; inspect or repair it with: python -m disque.tools.check_aof [--fix] %s" % self.path
        return AOFError("cannot load the append only file: %s" % text, e.offset)

    # -- writing -------------------------------------------------------------

    def _open(self):
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.size = self.base_size = os.fstat(self.fd).st_size

    def append(self, record):
        if not self.enabled:
            return
        data = record_bytes(record)
        self.buf.append(data)
        if self.rewriting is not None:
            self.rewriting.buf.append(data)

    def flush(self):
        if not self.buf or self.fd is None:
            return
        data = b"".join(self.buf)
        self.buf = []
        try:
            os.write(self.fd, data)
            self.size += len(data)
            self.last_write_status = "ok"
        except OSError as e:
            self.last_write_status = "err"
            log.error("Error writing the AOF: {e}", e=e.strerror)
            return
        if self.rewriting is not None and self.config["no-appendfsync-on-rewrite"]:
            return
        policy = self.config["appendfsync"]
        if policy == "always":
            os.fsync(self.fd)
        elif policy == "everysec":
            now = time.time()
            if not self.fsync_pending and now - self.last_fsync >= 1.0 and self.reactor is not None:
                self.fsync_pending = True
                self.last_fsync = now
                fd = self.fd
                d = threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), os.fsync, fd)
                d.addBoth(self._fsynced)

    def _fsynced(self, result):
        self.fsync_pending = False
        return None

    def maybe_auto_rewrite(self, node):
        pct = self.config["auto-aof-rewrite-percentage"]
        if not pct or self.rewriting is not None or self.fd is None:
            return
        if self.size >= self.config["auto-aof-rewrite-min-size"] and \
                self.size >= self.base_size * (100 + pct) // 100:
            log.info("Starting automatic AOF rewrite ({size} bytes)", size=self.size)
            self.rewrite(node)

    # -- rewriting -----------------------------------------------------------

    def rewrite(self, node, controlled=False):
        if self.rewriting is not None:
            return b"-ERR Background append only file rewriting already in progress\r\n"
        self.rewriting = Rewrite(self, node, controlled)
        self.rewriting.step()
        return b"+Background append only file rewriting started\r\n"

    def rewrite_now(self, node, controlled):
        """A blocking full rewrite (SHUTDOWN REWRITE-AOF: no client is
        served any more, so none can take a job while it is written)."""
        self.rewriting = None
        r = Rewrite(self, node, controlled)
        r.run_to_end()
        if self.last_rewrite_status != "ok":
            raise OSError("the append only file could not be rewritten")
        log.info("AOF written for a {kind} restart", kind="controlled" if controlled else "plain")

    def _rewrite_done(self, rewrite, ok):
        self.rewriting = None
        self.last_rewrite_status = "ok" if ok else "err"
        self.last_rewrite_time = int(rewrite.elapsed())
        self.last_rewrite_pause_ms = rewrite.max_step_ms

    # -- state -----------------------------------------------------------------

    def set_enabled(self, enabled, node):
        """CONFIG SET appendonly: on writes the current state at once (a
        rewrite), then appends; off closes the file."""
        if enabled == self.enabled:
            return
        self.enabled = enabled
        if enabled:
            self._open()
            self.rewrite(node)
        else:
            self.close()

    def info(self):
        fields = [
            ("loading", int(self.loading is not None)), ("aof_enabled", int(self.enabled)),
            ("aof_state", "on" if self.enabled and self.fd is not None else "off"),
            ("aof_rewrite_in_progress", int(self.rewriting is not None)), ("aof_rewrite_scheduled", 0),
            ("aof_last_rewrite_time_sec", self.last_rewrite_time),
            ("aof_current_rewrite_time_sec", int(self.rewriting.elapsed()) if self.rewriting else -1),
            ("aof_last_bgrewrite_status", self.last_rewrite_status),
            ("aof_last_write_status", self.last_write_status),
        ]
        if self.enabled:  # as the original: the size fields only while AOF is on
            fields += [("aof_current_size", self.size), ("aof_base_size", self.base_size),
                       ("aof_last_rewrite_max_pause_ms", self.last_rewrite_pause_ms)]
        # Work in progress, at the end as the original's loading_* fields.
        if self.rewriting is not None:
            fields += self.rewriting.progress_fields()
        if self.loading is not None:
            fields += self.loading.progress_fields()
        return fields

    def close(self):
        if self.loading is not None:  # stopped while loading: the file stays as it is
            self.loading.abandon()
        self.flush()
        if self.fd is not None:
            try:
                os.fsync(self.fd)
            finally:
                os.close(self.fd)
                self.fd = None


class Rewrite:
    """One incremental rewrite of the AOF from the node's jobs."""

    def __init__(self, aof, node, controlled):
        self.aof = aof
        self.node = node
        self.controlled = controlled
        self.buf = []  # records appended meanwhile
        self.tmp = "%s.rewrite-%d.tmp" % (aof.path, os.getpid())
        self.f = open(self.tmp, "wb")
        if controlled:
            self.f.write(MARKER)
        self.buckets = node.jobs.table._buckets
        self.index = 0
        self.total = len(node.jobs)  # jobs to go through, as at the start
        self.visited = 0  # jobs gone through: written, or skipped (acked, waiting for copies)
        self.written = 0  # LOADJOB records written
        self.started = aof.clock()
        self.max_step_ms = 0
        self.unsynced = 0  # bytes written since the last incremental fsync

    def elapsed(self):
        return self.aof.clock() - self.started

    def progress_fields(self):
        """INFO's fields for this rewrite (while it is in progress)."""
        perc, rate, eta = progress(self.visited, self.total, self.elapsed())
        return [("aof_rewrite_jobs_written", self.written), ("aof_rewrite_jobs_total", self.total),
                ("aof_rewrite_progress_perc", perc), ("aof_rewrite_rate_jobs_per_sec", int(rate)),
                ("aof_rewrite_eta_seconds", eta)]

    def _write_some(self, budget):
        out = []
        buckets = self.buckets
        while self.index < len(buckets) and budget > 0:
            jobs = list(buckets[self.index].values())
            self.visited += len(jobs)
            for job in jobs:
                if job.state != ACKED and job.state != WAIT_REPL:
                    out.append(encode(b"LOADJOB", serialize(job)))
                    budget -= 1
            self.index += 1
        self.written += len(out)
        if out:
            data = b"".join(out)
            self.f.write(data)
            self.unsynced += len(data)
            if self.unsynced >= REWRITE_FSYNC_BYTES and self.aof.config["aof-rewrite-incremental-fsync"]:
                self.f.flush()
                os.fsync(self.f.fileno())
                self.unsynced = 0
        return self.index >= len(buckets)

    def step(self):
        t = time.perf_counter()
        try:
            done = self._write_some(self.aof.rewrite_step)
        except OSError as e:
            log.error("AOF rewrite failed: {e}", e=e.strerror)
            self._abort()
            return
        self.max_step_ms = max(self.max_step_ms, int((time.perf_counter() - t) * 1000))
        if done:
            self._finish()
        else:
            self.aof.reactor.callLater(0, self.step)

    def run_to_end(self):
        while not self._write_some(1 << 30):
            pass
        self._finish()

    def _finish(self):
        aof = self.aof
        try:
            aof.flush()
            self.f.write(b"".join(self.buf))
            self.f.flush()
            os.fsync(self.f.fileno())
            self.f.close()
            os.replace(self.tmp, aof.path)
        except OSError as e:
            log.error("AOF rewrite failed: {e}", e=e.strerror)
            self._abort()
            return
        if aof.fd is not None:
            os.close(aof.fd)
            aof.fd = None
        if aof.enabled:
            aof._open()
        aof._rewrite_done(self, True)
        log.info("AOF rewritten in {t:.2f}s (longest pause {ms} ms)", t=self.elapsed(), ms=self.max_step_ms)

    def _abort(self):
        try:
            self.f.close()
            os.unlink(self.tmp)
        except OSError:
            pass
        self.aof._rewrite_done(self, False)


class Load:
    """One load of the AOF into a node: records applied by :meth:`step`,
    all at once or a slice at a time, then the end of the load
    (``AOFPersistence._loaded``).  Progress is measured in bytes of whole
    records applied (exact: records are written canonically)."""

    def __init__(self, aof, node, controlled):
        self.aof = aof
        self.node = node
        self.controlled = controlled
        self.total = os.path.getsize(aof.path)
        self.started = self.last_log = aof.clock()
        self.loaded = 0  # bytes of the records applied
        self.records = 0  # records applied
        self._records = read_records(aof.path)
        aof.loading = self

    def step(self, seconds):
        """Apply records for about ``seconds`` (``inf``: all of them); True
        once the load is complete.  Raises AOFError (the message
        AOFPersistence.load gives) for an unusable file; the load is over
        then too."""
        try:
            return self._step(seconds)
        except AOFError as e:
            self.abandon()
            raise self.aof._load_error(e) from None
        except BaseException:
            self.abandon()
            raise

    def _step(self, seconds):
        clock = self.aof.clock
        deadline = time.perf_counter() + seconds
        node = self.node
        applied = self.records
        countdown = CLOCK_EVERY
        end = self.loaded
        for argv, end in self._records:
            if argv is None:  # end: where the last whole record ends
                self.records, self.loaded = applied, end
                self._records = None
                self.aof._loaded(self, end)
                self.aof.loading = None
                return True
            problem = apply_record(node, argv)
            if problem:
                offset = end - _encoded_len(argv)
                raise AOFError("%s after offset %d" % (problem, offset), offset)
            applied += 1
            countdown -= 1
            if not countdown:
                countdown = CLOCK_EVERY
                self.records, self.loaded = applied, end
                now = clock()
                if now - self.last_log >= 1.0:
                    self.last_log = now
                    perc, rate, eta = progress(end, self.total, now - self.started)
                    log.info("Loading the AOF: {n} records ({rate:.0f}/s), {pct:.0f}% of {size} bytes, "
                             "{eta} s left", n=applied, rate=applied / (now - self.started), pct=perc,
                             size=self.total, eta=eta)
                if time.perf_counter() >= deadline:
                    return False
        raise AOFError("the file ended unexpectedly")  # (read_records always ends with its None)

    def abandon(self):
        """Stop here (an error, or the node stops while loading)."""
        if self._records is not None:
            self._records.close()  # closes the file
            self._records = None
        if self.aof.loading is self:
            self.aof.loading = None

    def progress_fields(self):
        """INFO's fields for this load: Redis' ``loading_*`` fields, then
        the records and the rates."""
        elapsed = self.aof.clock() - self.started
        perc, rate, eta = progress(self.loaded, self.total, elapsed)
        return [("loading_start_time", int(self.started)), ("loading_total_bytes", self.total),
                ("loading_loaded_bytes", self.loaded), ("loading_loaded_perc", perc),
                ("loading_eta_seconds", eta), ("loading_loaded_records", self.records),
                ("loading_rate_bytes_per_sec", int(rate)),
                ("loading_rate_records_per_sec", int(self.records / elapsed) if elapsed > 0 else 0)]
