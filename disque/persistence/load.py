"""Loading the append only file into a node: all at once (a small file,
before the node listens) or a slice at a time while it serves
``-LOADING`` (:class:`Load`), with the progress INFO shows
(:func:`progress`)."""

import math
import os
import time

from ..io.logs import logger
from .records import CATALOG, DAMAGE, DELJOB, LOADJOB, AOFError
from .scan import scan_records

log = logger("disque.aof")

CLOCK_EVERY = 128  # records applied between two looks at the clocks while loading
DAMAGE_LOG_MAX = 100  # damaged records logged one by one by a load; the rest are only counted


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



class Load:
    """One load of the AOF into a node: records applied by :meth:`step`,
    all at once or a slice at a time, in file order (catalog entries
    through ``node.settings.load``: merged, so a later one of a key wins
    as it did when it was written), then the end of the load
    (``AOFPersistence._loaded``).  Progress is measured in bytes of whole
    records applied (exact: records are written canonically), damaged
    bytes skipped included.

    Damage (see :mod:`disque.persistence.scan`) is handled by
    ``aof-load-damaged``: ``refuse`` (the default) stops the load at the
    first damage with its AOFError; ``skip`` logs each damaged record (its
    offset and job ID: the first ``DAMAGE_LOG_MAX``), counts it in
    ``damaged_records`` and ``damaged_bytes`` and loads on without it."""

    def __init__(self, aof, node, controlled):
        self.aof = aof
        self.node = node
        self.controlled = controlled
        self.total = os.path.getsize(aof.path)
        self.started = self.last_log = aof.clock()
        self.loaded = 0  # bytes of the records applied
        self.records = 0  # records applied
        self.damaged_records = 0  # records skipped as damaged (aof-load-damaged skip)
        self.damaged_bytes = 0  # their bytes
        self.damages = 0  # damaged parts found (a part of framing damage may hold several records)
        self._records = scan_records(aof.path, skip_damaged=aof.config["aof-load-damaged"] == "skip")
        self._finishing = None  # once the records are applied: the steps that make the jobs active
        self.queued = 0  # jobs those steps queued (a controlled restart)
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
        if self._finishing is not None:
            return self._finish(deadline)
        node = self.node
        applied = self.records
        countdown = CLOCK_EVERY
        end = self.loaded
        jobs = node.jobs
        for kind, value, end in self._records:
            if kind is LOADJOB:
                jobs.load(value)
                applied += 1
            elif kind is DELJOB:
                jobs.load_delete(value)
                applied += 1
            elif kind is CATALOG:
                node.settings.load(value)
                applied += 1
            elif kind is None:  # end: where the last whole record ends
                self.records, self.loaded = applied, end
                self._records = None
                self._finishing = self.aof._loaded(self, end)
                return self._finish(deadline)
            elif kind is DAMAGE:
                self._damaged(value)
            else:  # the marker
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
        raise AOFError("the file ended unexpectedly")  # (scan_records always ends with its None)

    def _finish(self, deadline):
        """Make the loaded jobs active, a step at a time until ``deadline``
        (``perf_counter``); True once the load is complete."""
        for self.queued in self._finishing:
            if time.perf_counter() >= deadline:
                return False
        self._finishing = None
        self.aof._finished(self, self.queued)
        self.aof.loading = None
        return True

    def _damaged(self, damage):
        """Skip ``damage`` (``aof-load-damaged skip``): log it and count it."""
        self.damages += 1
        if self.damages <= DAMAGE_LOG_MAX:
            log.warn("{line}; skipped (aof-load-damaged skip)", line=damage.describe())
        elif self.damages == DAMAGE_LOG_MAX + 1:
            log.warn("More damaged AOF records: counted, no longer logged one by one")
        self.damaged_records += damage.records
        self.damaged_bytes += damage.size

    def abandon(self):
        """Stop here (an error, or the node stops while loading)."""
        if self._records is not None:
            self._records.close()  # closes the file
            self._records = None
        self._finishing = None
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
