"""The node's jobs: the spec's generic functions LOOKUP-JOB, REGISTER and
UNREGISTER, and when each job needs the node's attention again.

:class:`Jobs` owns the job table (ID -> :class:`~disque.core.job.Job`) and
the DEDUP key index of the jobs in it.  It also holds what every other part
computes about a single job: its next awake time in the due-time schedule
("updateJobAwakeTime"), its requeue time, its bus record, and the loading
of an append only file.

Invariants:

* a job is in the table iff it is registered; a registered job with a DEDUP
  key is in the key index under that key;
* every registered job is scheduled (``job.awake > 0``) at the earliest
  time it needs attention, and that is never after its TTL (``etime``).
"""

from .job import (
    ACKED, ACTIVE, F_BCAST_QUEUED, F_BCAST_WILLQUEUE, F_LIMIT_SLOT, F_LOADED, F_NACK_DELAYED, Job, QUEUED, WAIT_REPL,
    WILLQUEUE_ADVANCE
)
from . import messages
from .dedup import DedupIndex
from .effects import Persist
from .table import JobTable

TIME_ERR = 500  # ms, random spread added to requeue times (desync nodes)
FINISH_LOAD_STEP = 5000  # jobs made active per step at the end of a load (Jobs.finishing_load)


class Jobs:
    def __init__(self, node):
        self.node = node
        self.table = JobTable(4096)
        self.get = self.table.get  # LOOKUP-JOB
        self.dedup = DedupIndex()  # ADDJOB ... DEDUP keys; the runtime sets .window
        self._schedule = node.schedule
        self._random = node.rng.random
        # How many registered jobs are ACKED (kept for their garbage
        # collection): counted as they change, so /metrics needs no scan.
        self.acked = 0

    def __len__(self):
        return len(self.table)

    def __contains__(self, job_id):
        return job_id in self.table

    def values(self):
        return self.table.values()

    # -- REGISTER / UNREGISTER -------------------------------------------

    def add(self, job) -> bool:
        """Put ``job`` in the table and its DEDUP key in the index, without
        scheduling it (ADDJOB's fast path does both inline); False if the ID
        is taken."""
        if not self.table.add(job.id, job):
            return False
        if job.state == ACKED:
            self.acked += 1
        if job.extra.dedup is not None:  # (job.dedup, read without the property)
            self.dedup.add(job)
        return True

    def register(self, job) -> bool:
        if not self.add(job):
            return False
        self.update_awake(job)
        return True

    def unregister(self, job, void: bool = False) -> bool:
        """Forget a job.  Its DEDUP key is remembered for the window unless
        the job never was accepted (still waiting for its copies, or
        ``void``: its creator says the ADDJOB failed)."""
        if self.table.pop(job.id) is None:
            return False
        node = self.node
        if job.extra.dedup is not None:
            self.dedup.remove(job, node.now, not void and job.state != WAIT_REPL)
        if ACTIVE <= job.state < ACKED:
            self.log_deleted(job)
        elif job.state == ACKED:
            self.acked -= 1
        self._schedule.remove(job)
        if job.state == QUEUED:
            node.queues.dequeue(job)
        elif job.flags & F_LIMIT_SLOT:
            node.qlimits.release(job)
        return True

    def log_added(self, job) -> None:
        """A LOADJOB record for the AOF (when persistence is on)."""
        node = self.node
        if node.persist:
            node.outbox.append(Persist((b"LOADJOB", job)))

    def log_deleted(self, job) -> None:
        """A DELJOB record for the AOF (when persistence is on): the job
        must not come back at the next load (forgotten, or acknowledged)."""
        node = self.node
        if node.persist:
            node.outbox.append(Persist((b"DELJOB", job.id)))

    # -- Awake time (updateJobAwakeTime) ---------------------------------

    def requeue_time(self, job) -> int:
        """When ``job`` is queued again if nobody acknowledges it: RETRY
        from now, plus a random spread so copies on several nodes do not
        all fire at once.  (ADDJOB's fast path inlines it.)"""
        return self.node.now + job.retry * 1000 + int(self._random() * TIME_ERR)

    def jitter(self) -> int:
        return int(self._random() * TIME_ERR)

    def update_awake(self, job) -> None:
        """Schedule ``job`` at the earliest of its TTL, its requeue time
        (500 ms earlier while a WILLQUEUE is due) or, once acknowledged,
        its next garbage collection attempt."""
        at = job.etime
        state = job.state
        if state == ACKED:
            gc = self.node.acks.next_gc_time(job)
            if gc < at:
                at = gc
        elif (state == ACTIVE or state == QUEUED) and job.qtime:
            qtime = job.qtime
            if job.flags & F_BCAST_WILLQUEUE:
                qtime -= WILLQUEUE_ADVANCE
            if qtime < at:
                at = qtime
        self._schedule.set(job, at if at > 0 else 1)

    def set_requeue_time(self, job, qtime: int) -> None:
        # Never violate at-most-once because of a caller's mistake.
        if job.retry == 0 or job.qtime == 0:
            return
        job.qtime = qtime
        self.update_awake(job)

    def postpone(self, job) -> None:
        """Another node queued or is working on ``job``: requeue it RETRY
        from now, sending WILLQUEUE first (QUEUED, WORKING, NACK, YOURJOBS).
        A postponement never brings a requeue sooner: a job in a delayed
        NACK (F_NACK_DELAYED) waits at least until the delay's end."""
        job.flags |= F_BCAST_WILLQUEUE
        at = self.requeue_time(job)
        if job.flags & F_NACK_DELAYED and job.qtime > at:
            at = job.qtime
        self.set_requeue_time(job, at)

    # -- Bus records ------------------------------------------------------

    @staticmethod
    def record(job) -> messages.JobRecord:
        """The job as REPLJOB / YOURJOBS carry it."""
        return messages.JobRecord(job.id, job.queue, job.body, job.repl, job.ctime, job.etime, job.delay,
                                  job.retry, job.nacks, job.deliv, tuple(job.delivered), job.dedup or b"",
                                  job.opts)

    def from_record(self, rec, qtime: int):
        """A new ACTIVE job from a REPLJOB / YOURJOBS record (not yet
        registered): counters, the nodes that may hold it (this one
        included), its DEDUP key, the queue name shared with an existing
        queue."""
        node = self.node
        defaults = node.queues.job_defaults(rec.queue, rec.repl, rec.retry, rec.opts)
        job = Job(rec.id, defaults.queue, rec.body, ACTIVE, rec.repl, rec.ctime,
                  rec.etime, rec.delay, rec.retry, qtime, defaults)
        job.nacks = rec.nacks
        job.deliv = rec.deliv
        me = node.my_id
        job.delivered = rec.delivered if me in rec.delivered else (*rec.delivered, me)
        if rec.dedup:
            job.dedup = rec.dedup
        return job

    # -- Loading the AOF ("Disque and disk persistence") -------------------

    def load(self, job) -> None:
        """A LOADJOB record: the latest record of a job wins."""
        old = self.table.get(job.id)
        if old is not None:
            self.unregister(old, void=True)
        job.awake = 0
        self.node.queues.share_defaults(job)
        self.add(job)

    def load_delete(self, job_id: bytes) -> None:
        """A DELJOB record.  Keys of deleted jobs are not remembered across
        a restart (the file does not say why the job went)."""
        job = self.table.get(job_id)
        if job is not None:
            self.unregister(job, void=True)

    def finish_load(self, enqueue_queued: bool) -> int:
        """After the AOF: jobs come back active, waiting for their requeue
        time (RETRY 0 jobs never are).  A controlled restart
        (``enqueue_queued``) puts jobs that were queued back in their
        queues, RETRY 0 ones included: the file was written while no
        client could take them.  Returns how many were queued.  All at
        once: :meth:`finishing_load` does the same in steps."""
        queued = 0
        for queued in self.finishing_load(enqueue_queued):
            pass
        return queued

    def finishing_load(self, enqueue_queued: bool, step: int = FINISH_LOAD_STEP):
        """:meth:`finish_load` in steps of ``step`` jobs, so a node that
        loaded a big file keeps answering (``-LOADING``) meanwhile: a
        generator yielding how many jobs were queued so far after each
        step, the last time once every job is done.  Invariant: between
        two steps nothing else touches the jobs (the node is still
        loading: clients are refused, peers kept out, no timer runs), so
        the table is walked as the load left it."""
        queued = 0
        budget = step
        enqueue_first = self.node.queues.enqueue_first
        self.acked = 0  # every loaded job comes back active
        for job in self.table.values():
            was_queued = job.state == QUEUED
            job.state = ACTIVE
            # F_LOADED: the other copies may have been acknowledged or
            # queued while this node was down (see disque.core.requeue).
            # A delayed NACK's requeue (F_NACK_DELAYED) still counts nothing.
            job.flags = (job.flags & F_NACK_DELAYED) | F_BCAST_QUEUED | \
                (F_BCAST_WILLQUEUE | F_LOADED if job.retry else 0)
            if job.retry == 0:
                job.qtime = 0
            if enqueue_queued and was_queued:
                enqueue_first(job)
                queued += 1
            else:
                self.update_awake(job)
            budget -= 1
            if not budget:
                budget = step
                yield queued
        yield queued

    def clear(self) -> None:
        self.acked = 0
        self.table.clear()
        self.dedup.clear()
