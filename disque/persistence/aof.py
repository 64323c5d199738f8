"""The ``aof`` persistence: an append only file of job creations and
deletions ("Disque and disk persistence" in the spec), and of the
catalog's entries.  The records and their encoding are in
:mod:`.records`, loading in :mod:`.load`, rewriting in :mod:`.rewrite`;
every call that touches the disk goes through the file layer
(:mod:`.files`).

Writing: the core's ``Persist`` effects become records in a buffer that
:meth:`AOFPersistence.flush` writes at the end of each reactor batch,
before replies leave (so an acknowledged ADDJOB is in the file).
``appendfsync always`` fsyncs there too; ``everysec`` fsyncs at most once a
second in a thread, off the reactor, the tail included (the tick flushes
even when no command comes); ``no`` leaves it to the kernel.  With
``no-appendfsync-on-rewrite yes`` neither fsyncs while a rewrite runs.

Write errors (the original's ``aof.c``, and beyond):

* a short or failed write never leaves a partial record: the bytes that
  made it are cut away (``ftruncate`` back to the last good size), the
  buffer is kept and retried at every flush (every tick at least);
* meanwhile the node is in error: commands flagged ``write`` and PING get
  ``-MISCONF Errors writing to the AOF file: <reason>`` (the runtime swaps
  its dispatch), INFO shows ``aof_last_write_status:err`` and why, the log
  says so once when it starts and once when it is solved;
* :meth:`flush` returns False while records it was given are not as
  durable as the policy promises: the runtime then holds the replies and
  bus frames of the turns that appended them (no ID, no GOTJOB leaves for
  a record that is not on disk), under every policy;
* a failed fsync is never retried: the kernel may have dropped the pages
  it could not write and marked them clean (PostgreSQL's "fsyncgate"), so
  the file is suspect; the node is in error until a rewrite from memory
  (new file, fsync, rename, directory fsync) replaces it, tried at most
  once a second.

Loading reads the file in chunks, logs progress, repairs a truncated last
record (``aof-load-truncated yes``) and refuses a file damaged before its
end (a checksum that does not match, bytes that are not records) with the
offset, the job and the repair tool to use, or, with ``aof-load-damaged
skip``, loads it without the damaged records, then rewrites it.  A small
file (up to ``sync-load-max`` bytes, 1 MB: a tenth of a second) is loaded
at once when the node is built, before it listens; a bigger one is loaded
by the service in slices of a few milliseconds, one per reactor turn
(:meth:`begin_load`), while clients get ``-LOADING`` (see
:mod:`disque.node.service`).  ``info()`` shows the progress of a load and of a
rewrite.

This module stays over 400 lines on purpose.  What could leave already has
(the records, loading, rewriting, the file layer); what is left is one
object that owns the live file: its descriptor, the buffer, the size and
the error state (write failed, fsync failed, repair pending) are read and
changed by every path here (append and flush, the end of a load, the end
of a rewrite, CONFIG SET appendonly, close), and the rules above are the
transitions of that one state.  Split, the halves would share it through
private attributes.
"""

import errno
import os
import time

from twisted.internet import threads
from twisted.python.failure import Failure
from zope.interface import implementer

from ..io.files import OS, PartialWrite, remove_stale_temps, write_all
from ..interfaces import IPersistence
from ..io.logs import logger
from .load import Load
from .records import MARKER, AOFError, record_bytes
from .rewrite import REWRITE_STEP, Rewrite

log = logger("disque.aof")

SYNC_LOAD_MAX = 1 << 20  # bytes: bigger files load in the reactor (aof:sync-load-max=...)


def _reason(e):
    """The text of an OSError, as -MISCONF and the log give it."""
    return e.strerror or os.strerror(e.errno or errno.EIO)


@implementer(IPersistence)
class AOFPersistence:
    """The ``aof`` strategy: one append only file in ``dir``.  ``clock``
    (tests): the wall clock progress is measured with (seconds)."""

    def __init__(self, config, reactor=None, rewrite_step=REWRITE_STEP, sync_load_max=SYNC_LOAD_MAX, clock=None,
                 fs=None):
        self.config = config
        self.reactor = reactor
        self.rewrite_step = rewrite_step
        self.sync_load_max = sync_load_max
        self.clock = clock or (lambda: time.time())
        self.fs = fs or OS  # every write, fsync, truncate and rename (disque/io/files.py)
        self.path = os.path.join(config["dir"], config["appendfilename"])
        self.node = None  # the node whose state a repairing rewrite writes (known from the load)
        self.fd = None
        self.generation = 0  # bumped when the live file changes: a background fsync of an older one is moot
        self.buf = []  # records appended and not yet written (kept and retried after a failed write)
        self.unsynced = False  # bytes written since the last fsync
        self.enabled = bool(config["appendonly"])
        self.last_fsync = 0.0
        self.fsync_pending = False
        self.size = 0  # bytes of whole records in the file
        self.base_size = 0  # size after the last rewrite (auto rewrite baseline)
        self.rewriting = None  # a Rewrite while in progress
        self.last_rewrite_time = -1
        self.last_rewrite_status = "ok"
        self.last_rewrite_pause_ms = 0
        self.loading = None  # a Load while in progress
        # The error state (see "Write errors" in the module docstring).
        self.error = None  # OSError of the failed write or fsync, None while writes go through
        self.needs_rewrite = False  # the file may miss records (a failed fsync) or hold stale ones: only a rewrite from memory repairs it
        self.next_repair = 0.0  # clock time of the next repairing rewrite
        self.on_error = None  # the runtime's callable(error or None), at each change of state

    @property
    def last_write_status(self):
        return "ok" if self.error is None else "err"

    # -- loading -------------------------------------------------------------

    # What the last load found damaged and skipped (aof-load-damaged skip):
    # INFO's aof_load_damaged_records and aof_load_damaged_bytes.
    load_damaged_records = 0
    load_damaged_bytes = 0

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
        self.node = node
        for path in remove_stale_temps(self.fs, self.path):
            log.info("Removed {path}, left by a rewrite the node did not finish", path=path)
        try:
            if not os.path.exists(self.path):
                if self.enabled:
                    self._open()
                return None
            with open(self.path, "rb") as f:
                controlled = f.read(len(MARKER)) == MARKER
        except OSError as e:  # a directory the node may not write, a file name that is a directory...
            raise AOFError("cannot open the append only file %s: %s" % (self.path, e.strerror or e)) from None
        if not (self.enabled or controlled or self.config["aof-enqueue-jobs-once"]):
            return None
        return Load(self, node, controlled)

    def _loaded(self, loading, good):
        """The records are applied (``good``: where the last whole one
        ends): the end of a load, as the original does it.  Returns the
        steps that make the loaded jobs active (``Jobs.finishing_load``),
        after which the load calls :meth:`_finished`.  A load that
        skipped damaged records (``aof-load-damaged skip``) is followed by
        a rewrite, as a controlled restart's: the damage does not stay in
        the file, and the next start does not find it again."""
        node = loading.node
        total = loading.total
        if good < total:
            if not self.config["aof-load-truncated"]:
                raise AOFError("the last record is truncated (%d of %d bytes are whole records); "
                               "run python -m disque.tools.check_aof --fix %s" % (good, total, self.path), good)
            log.warn("The AOF ends with a truncated record: dropping its last {n} bytes", n=total - good)
            fd = self.fs.open_append(self.path)
            try:
                self.fs.truncate(fd, good)
                self.fs.fsync(fd)  # (records appended next must not follow the torn bytes after a crash)
            finally:
                self.fs.close(fd)
        return node.jobs.finishing_load(loading.controlled or self.config["aof-enqueue-jobs-once"])

    def _finished(self, loading, queued):
        """The loaded jobs are active (``queued`` of them queued): the rest
        of the end of a load."""
        node = loading.node
        controlled = loading.controlled
        log.info("AOF loaded: {n} records, {jobs} jobs ({queued} queued) in {t:.2f}s",
                 n=loading.records, jobs=len(node.jobs), queued=queued, t=self.clock() - loading.started)
        damaged = loading.damaged_records
        self.load_damaged_records, self.load_damaged_bytes = damaged, loading.damaged_bytes
        if damaged:
            log.warn("The AOF was loaded without {n} damaged records ({size} bytes): their jobs are back only "
                     "if other nodes hold copies; a deleted job whose DELJOB was damaged is back too{then}",
                     n=damaged, size=loading.damaged_bytes,
                     then="; rewriting the file" if self.enabled else "")
        if self.config["aof-enqueue-jobs-once"]:
            self.config.set(b"aof-enqueue-jobs-once", b"no")  # once
        if controlled and not self.enabled:
            # Never reload stale state after a crash: the rename is made
            # durable before any client can take a job.
            self.fs.replace(self.path, self.path + ".loaded")
            try:
                self.fs.fsync_dir(os.path.dirname(self.path))
            except OSError as e:
                raise AOFError("cannot make the rename of %s to %s.loaded durable: %s (the file would queue its "
                               "jobs again at the next start)" % (self.path, self.path, e.strerror or e)) from None
        elif self.enabled:
            self._open()
            if controlled or damaged:
                # Drop the marker (the next start is a plain one) or the
                # damage, before any client is served: a crash must not
                # find them again (a delivered RETRY 0 job queued again).
                try:
                    self.rewrite_now(node, False)
                except OSError as e:  # writes refused (GETJOB too) until a rewrite works
                    self._stale(e, "The AOF could not be rewritten after the load: {error}; writes are refused "
                                   "until it is")

    def _load_error(self, e):
        """The AOFError to raise for ``e``: says which file and how to
        repair it (and, for damage, that the node can start without it)."""
        text = str(e)
        if e.damage is not None:
            text += ("; a node whose jobs have copies on other nodes can start without the damaged records "
                     "(aof-load-damaged skip)")
        if "check_aof" not in text:
            text += "; inspect or repair it with: python -m disque.tools.check_aof [--fix] %s" % self.path
        return AOFError("cannot load the append only file: %s" % text, e.offset, e.damage)

    # -- writing -------------------------------------------------------------

    def _open(self):
        """Open the live file for appending.  A file this creates is made
        durable by name at once (its directory fsynced): records
        acknowledged into it must not vanish with the directory entry."""
        if self.fd is None:
            created = not os.path.exists(self.path)
            self.fd = self.fs.open_append(self.path)
            self.size = self.base_size = self.fs.size(self.fd)
            self.generation += 1
            if created:
                try:
                    self.fs.fsync_dir(os.path.dirname(self.path))
                except OSError as e:
                    self._fsync_error(e)

    def append(self, record):
        if not self.enabled:
            return
        data = record_bytes(record)
        self.buf.append(data)
        if self.rewriting is not None:
            self.rewriting.buf.append(data)

    def flush(self):
        """The group commit point, at the end of each batch before its
        replies leave: write what was appended and, with ``appendfsync
        always``, fsync it.  True when every record appended so far is
        as durable as the policy promises (written; and fsynced with
        ``always``), False while the AOF is in error: then nothing that
        acknowledges the unwritten records may leave (the runtime holds
        those replies).  Called every tick too: a failed write is retried
        there, and the ``everysec`` fsync of a tail comes within a second
        even when traffic stops."""
        if self.fd is None:
            return True
        if self.buf and not self._write():
            return False
        if self.needs_rewrite:
            self._repair()
            return not self.needs_rewrite
        if self.unsynced and not (self.rewriting is not None and self.config["no-appendfsync-on-rewrite"]):
            policy = self.config["appendfsync"]
            if policy == "always":
                try:
                    self.fs.fsync(self.fd)
                except OSError as e:
                    self._fsync_error(e)
                    return False
                self.unsynced = False
                self.last_fsync = self._now()
            elif policy == "everysec":
                self._background_fsync()
        return True

    def _write(self):
        """Write the buffer; True if all of it reached the file.  A short or
        failed write never leaves a partial record: the bytes that made it
        are cut away (``ftruncate`` back to the last good size) and the
        whole buffer is kept for the next try.  If the cut fails too, the
        bytes stay and only the rest is kept: the next write completes the
        record (a crash before it leaves a torn tail, which loading
        truncates)."""
        data = self.buf[0] if len(self.buf) == 1 else b"".join(self.buf)
        try:
            write_all(self.fs, self.fd, data)
        except PartialWrite as e:
            if e.written:
                try:
                    self.fs.truncate(self.fd, self.size)
                except OSError as cut:
                    log.warn("Could not remove the short write from the append only file ({error}): "
                             "the rest of the record follows when the disk takes it", error=cut.strerror)
                    self.size += e.written
                    data = data[e.written:]
            self.buf = [data]
            self._set_error(e, "Error writing to the AOF file: {error}")
            return False
        self.buf = []
        self.size += len(data)
        self.unsynced = True
        if self.error is not None and not self.needs_rewrite:
            self._set_error(None, "AOF write error looks solved, Disque can write again.")
        return True

    def _now(self):
        """Seconds, on the reactor's clock when there is one (a test's
        clock moves it)."""
        return self.reactor.seconds() if self.reactor is not None else time.time()

    def _background_fsync(self):
        """``everysec``: fsync in a thread, at most once a second."""
        now = self._now()
        if self.fsync_pending or now - self.last_fsync < 1.0:
            return
        self.last_fsync = now
        self.unsynced = False  # (what is written by now is what this fsync covers)
        if getattr(self.reactor, "getThreadPool", None) is None:  # (no threads: a reactor under test) inline
            try:
                self.fs.fsync(self.fd)
            except OSError as e:
                self._fsync_error(e)
            return
        self.fsync_pending = True
        d = threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(), self.fs.fsync, self.fd)
        d.addBoth(self._fsynced, self.generation)

    def _fsynced(self, result, generation):
        self.fsync_pending = False
        if isinstance(result, Failure) and generation == self.generation:
            self._fsync_error(result.value)
        return None

    def _fsync_error(self, e):
        """A failed fsync is not retried: the kernel may have dropped the
        dirty pages it could not write and marked them clean, so a later
        fsync can succeed with the records lost (PostgreSQL's "fsyncgate").
        The file is suspect until a rewrite from memory replaces it."""
        self._stale(e, "fsync of the AOF file failed: {error}; rewriting it from memory")

    def _stale(self, e, message):
        """The file cannot be trusted to hold the state (``e``: why): the
        node is in error (-MISCONF) until a rewrite from memory replaces
        it, tried at most once a second."""
        if not isinstance(e, OSError):
            e = OSError(errno.EIO, str(e))
        self.needs_rewrite = True
        self.next_repair = 0.0
        self._set_error(e, message)

    def _repair(self):
        """Start the rewrite that replaces a suspect file (at most once a
        second while it fails: a full disk, say)."""
        now = self._now()
        if self.rewriting is not None or self.node is None or now < self.next_repair:
            return
        self.next_repair = now + 1.0
        self.rewrite(self.node)

    def _set_error(self, e, message):
        """Enter the error state (``e``: the OSError) or leave it (None);
        logged once each way, and the runtime told (-MISCONF)."""
        was = self.error
        self.error = e
        if e is not None and was is None:
            log.error(message, error=_reason(e))
        elif e is None and was is not None:
            log.warn(message)
        if (e is None) != (was is None) and self.on_error is not None:
            self.on_error(e)

    def error_text(self):
        """What -MISCONF says: the error of the failed write or fsync."""
        return _reason(self.error) if self.error is not None else None

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
        try:
            self.rewriting = Rewrite(self, node, controlled)
        except OSError as e:
            log.error("AOF rewrite failed: cannot create its temp file: {e}", e=e.strerror)
            self.last_rewrite_status = "err"
            return b"-ERR Background append only file rewriting failed: " + (e.strerror or "error").encode() + b"\r\n"
        self.rewriting.step()
        return b"+Background append only file rewriting started\r\n"

    def rewrite_now(self, node, controlled):
        """A blocking full rewrite (SHUTDOWN REWRITE-AOF, DEBUG FLUSHALL, the
        end of a load that must drop a marker or damage: no client can take
        a job while it is written).  Raises the OSError that made it fail."""
        if self.rewriting is not None:  # abandoned: this one writes everything
            self.rewriting.discard()
            self.rewriting = None
        Rewrite(self, node, controlled).run_to_end()
        log.info("AOF rewritten in full{kind}", kind=" for a controlled restart" if controlled else "")

    def _rewrite_done(self, rewrite, ok):
        """The end of a rewrite.  A new file holds the whole state (the jobs
        as they were, then every record appended meanwhile) and is on disk
        (fsynced, renamed, directory fsynced): whatever the old file missed
        (a write or an fsync that failed) no longer matters."""
        self.rewriting = None
        self.last_rewrite_status = "ok" if ok else "err"
        if ok:
            self.buf = []
            self.unsynced = False
            if self.error is not None:
                self.needs_rewrite = False
                self._set_error(None, "AOF rewritten from memory: the write error is solved, Disque can "
                                      "write again.")
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
            self.buf = []  # (what could not be written goes nowhere now)
            self.needs_rewrite = False
            if self.error is not None:
                self._set_error(None, "AOF turned off: writes are accepted again.")

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
        if self.error is not None:  # ours: why -MISCONF (Redis logs only the errno)
            fields += [("aof_last_write_errno", self.error.errno or 0),
                       ("aof_last_write_error", self.error_text()),
                       ("aof_pending_bytes", sum(len(b) for b in self.buf))]
        if self.enabled:  # as the original: the size fields only while AOF is on
            fields += [("aof_current_size", self.size), ("aof_base_size", self.base_size),
                       ("aof_last_rewrite_max_pause_ms", self.last_rewrite_pause_ms)]
        if self.load_damaged_records:  # ours (aof-load-damaged skip), only then: INFO stays the original's
            fields += [("aof_load_damaged_records", self.load_damaged_records),
                       ("aof_load_damaged_bytes", self.load_damaged_bytes)]
        # Work in progress, at the end as the original's loading_* fields.
        if self.rewriting is not None:
            fields += self.rewriting.progress_fields()
        if self.loading is not None:
            fields += self.loading.progress_fields()
        return fields

    def close(self):
        """Write and fsync what is left, and close the file (shutdown, or
        appendonly no).  Errors are logged: the node stops anyway."""
        if self.loading is not None:  # stopped while loading: the file stays as it is
            self.loading.abandon()
        if self.fd is None:
            return
        self.flush()
        if self.buf:
            log.error("{n} bytes of AOF records could not be written before the file was closed: {error}",
                      n=sum(len(b) for b in self.buf), error=self.error_text())
        try:
            self.fs.fsync(self.fd)
        except OSError as e:
            log.error("fsync of the AOF file failed at close: {error}", error=e.strerror)
        finally:
            self.fs.close(self.fd)
            self.fd = None
            self.generation += 1
