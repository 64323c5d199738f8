"""Rewriting the append only file from the node's state, incrementally:
the catalog's entries first (tombstones included: a handful, written at
once), then a few thousand jobs per reactor turn go to a temp file while
new records go both to the live file and to the rewrite's buffer, appended
to the new file before it replaces the old one (fsynced, renamed,
directory fsynced: a crash at any instant leaves the old file or the new
one, whole).

An entry that wins while the rewrite runs is in that buffer, after the
entries written at the start: loading merges them in file order, so the
new file holds the catalog as it is when it replaces the old one.  A node
without catalog entries writes the file it wrote before there was a
catalog, byte for byte."""

import os
import time

from ..core.job import ACKED, WAIT_REPL
from ..io.files import rewrite_temp_path, write_all
from ..io.logs import logger
from .load import progress
from .records import CATALOG, MARKER, record_bytes

log = logger("disque.aof")

REWRITE_STEP = 5000  # jobs written per reactor turn while rewriting (aof:rewrite-step=...)
REWRITE_FSYNC_BYTES = 32 * 1024 * 1024  # aof-rewrite-incremental-fsync: as the original


class Rewrite:
    """One incremental rewrite of the AOF from the node's catalog and jobs.
    Invariant: the temp file exists from the construction until
    :meth:`_finish` renames it or :meth:`discard` removes it."""

    def __init__(self, aof, node, controlled):
        self.aof = aof
        self.node = node
        self.controlled = controlled
        self.buf = []  # records appended meanwhile
        self.fs = fs = aof.fs
        self.unsynced = 0  # bytes written since the last incremental fsync
        self.tmp = rewrite_temp_path(aof.path)
        self.fd = fs.create(self.tmp)
        head = [MARKER] if controlled else []
        head += [record_bytes((CATALOG, entry)) for entry in node.settings.entries()]
        if head:
            try:
                self._write(b"".join(head))
            except OSError:
                self.discard()
                raise
        self.buckets = node.jobs.table._buckets
        self.index = 0
        self.total = len(node.jobs)  # jobs to go through, as at the start
        self.visited = 0  # jobs gone through: written, or skipped (acked, waiting for copies)
        self.written = 0  # LOADJOB records written
        self.started = aof.clock()
        self.max_step_ms = 0

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
                    out.append(record_bytes((b"LOADJOB", job)))
                    budget -= 1
            self.index += 1
        self.written += len(out)
        if out:
            self._write(b"".join(out))
            if self.unsynced >= REWRITE_FSYNC_BYTES and self.aof.config["aof-rewrite-incremental-fsync"]:
                self.fs.fsync(self.fd)
                self.unsynced = 0
        return self.index >= len(buckets)

    def _write(self, data):
        write_all(self.fs, self.fd, data)
        self.unsynced += len(data)

    def step(self):
        if self.fd is None:  # discarded meanwhile
            return
        t = time.perf_counter()
        try:
            done = self._write_some(self.aof.rewrite_step)
        except OSError as e:
            self._abort(e)
            return
        self.max_step_ms = max(self.max_step_ms, int((time.perf_counter() - t) * 1000))
        if done:
            self._finish()
        else:
            self.aof.reactor.callLater(0, self.step)

    def run_to_end(self):
        """Write everything now (blocking); raises the OSError that made it
        fail (the temp file is gone then)."""
        try:
            while not self._write_some(1 << 30):
                pass
        except OSError as e:
            self._abort(e)
            raise
        error = self._finish()
        if error is not None:
            raise error

    def _finish(self):
        """Append what came meanwhile, fsync, rename over the AOF, fsync the
        directory, and switch the appends to the new file.  Returns the
        OSError that made it fail, or None."""
        aof = self.aof
        fs = self.fs
        try:
            aof.flush()  # (the old file stays complete should the rename fail)
            write_all(fs, self.fd, b"".join(self.buf))
            fs.fsync(self.fd)
            fs.close(self.fd)
            self.fd = None
            fs.replace(self.tmp, aof.path)
        except OSError as e:
            self._abort(e)
            return e
        if aof.fd is not None:
            fs.close(aof.fd)
            aof.fd = None
        if aof.enabled:
            aof._open()
        try:
            fs.fsync_dir(os.path.dirname(aof.path))
        except OSError as e:  # the rename may not survive a power cut: as a failed fsync of the AOF
            aof._rewrite_done(self, True)
            aof._fsync_error(e)
            return e
        aof._rewrite_done(self, True)
        log.info("AOF rewritten in {t:.2f}s (longest pause {ms} ms)", t=self.elapsed(), ms=self.max_step_ms)
        return None

    def _abort(self, error):
        log.error("AOF rewrite failed: {e}", e=error.strerror or error)
        self.discard()
        self.aof._rewrite_done(self, False)

    def discard(self):
        """Close and remove the temp file (a failed or abandoned rewrite)."""
        if self.fd is not None:
            try:
                self.fs.close(self.fd)
            except OSError:
                pass
            self.fd = None
        try:
            self.fs.unlink(self.tmp)
        except OSError:
            pass
