"""The node's queues and the spec's ENQUEUE and DEQUEUE.

:class:`Queues` holds every queue by name, creates one on first use, and
reclaims it once it has been idle for ``QUEUE_MAX_IDLE`` seconds with no
job, no blocked client and no pause flag.  ENQUEUE here is the original's
``enqueueJob``: the requeue time, the QUEUED broadcast of a re-queue and
the counters all follow from the job's flags.

Invariants:

* a job is QUEUED iff it is in its queue (``Queue.jobs``), and then it has a
  requeue time unless it is at-most-once (RETRY 0: ``qtime == 0`` once
  queued, so it is never queued again by the node itself);
* ``ready`` lists queues that received jobs while clients wait on them and
  may serve them (not paused out); :meth:`GetJob.serve_ready` empties it.
"""

from weakref import WeakValueDictionary, ref

from .deadletter import is_due
from .job import (
    ACTIVE, F_BCAST_QUEUED, F_BCAST_WILLQUEUE, F_DELIVERED, F_LIMIT_SLOT, F_NACK_DELAYED, JobExtra, QUEUED
)
from . import messages
from .queue import PAUSED_OUT, QUEUE_MAX_IDLE, Queue
from .table import BucketedDict


def _DEAD():
    """A weak reference whose object is gone (Queues._recent when empty)."""
    return None


class Queues:
    def __init__(self, node):
        self.node = node
        self._by_name = BucketedDict(256)
        self.get = self._by_name.get
        self.scan = self._by_name.scan
        self.ready = []
        self._idle = {}  # name -> Queue, candidates for reclaiming
        self.nacked = 0  # NACKs that queued a job again, all queues
        # (name, repl, retry) -> the shared JobExtra of such jobs, while any
        # job (or the Queue) holds it: queues come and go, jobs stay.
        self._job_defaults = WeakValueDictionary()
        # The last (key, weak reference to the JobExtra) found in
        # _job_defaults for a name with no queue: a replica's copies (whose
        # queue does not exist there) ask for the same one job after job,
        # and a WeakValueDictionary lookup is Python code.  (Weak, as the
        # dictionary: this keeps no JobExtra alive.)
        self._recent = (None, _DEAD)

    def __len__(self):
        return len(self._by_name)

    def values(self):
        return self._by_name.values()

    def queue_for(self, name: bytes) -> Queue:
        """The queue called ``name``, created if needed."""
        q = self._by_name.get(name)
        if q is None:
            q = Queue(name, self.node.now // 1000)
            self._by_name.add(name, q)
        return q

    def job_defaults(self, name: bytes, repl: int, retry: int, opts=None) -> JobExtra:
        """The shared JobExtra for new jobs of queue ``name`` with this
        REPLICATE, RETRY and options (one per key while in use; its
        ``queue`` is the queue's own name object when the queue exists).
        The queue keeps the last one asked for, which ADDJOB checks first."""
        q = self._by_name.get(name)
        if q is not None:
            defaults = q.job_defaults
            if defaults is not None and defaults.repl == repl and defaults.retry == retry and defaults.opts == opts:
                return defaults
            name = q.name
        key = (name, repl, retry, opts)
        if q is None:
            recent_key, recent = self._recent
            if recent_key == key:
                defaults = recent()
                if defaults is not None:
                    return defaults
        defaults = self._job_defaults.get(key)
        if defaults is None:
            defaults = self._job_defaults[key] = JobExtra(name, repl, retry, shared=True, opts=opts)
        if q is not None:
            q.job_defaults = defaults
        else:
            self._recent = (key, ref(defaults))
        return defaults

    def share_defaults(self, job) -> None:
        """Put ``job`` back on its queue's shared record if its own holds
        only defaults (jobs loaded from the AOF, a job whose copies were
        confirmed)."""
        extra = job.extra
        if not extra.shared and extra.at_defaults():
            job.extra = self.job_defaults(extra.queue, extra.repl, extra.retry, extra.opts)

    # -- ENQUEUE / DEQUEUE ------------------------------------------------

    def enqueue(self, job, nack: bool = False, q=None) -> bool:
        """ENQUEUE(job): put an active job in its queue; see queue.c.
        ``q`` is the job's queue when the caller already looked it up.

        A re-queue counts a NACK (``nack``) or an additional delivery and
        sends QUEUED, except the one a delayed NACK scheduled (counted when
        NACKed).  A job whose re-queue would pass its MAXDELIVERIES goes to
        its dead-letter queue instead (disque.core.deadletter)."""
        if job.state == QUEUED or job.qtime == 0:
            return False
        if job.retry == 0 and job.flags & F_DELIVERED:
            return False
        node = self.node
        flags = job.flags
        if flags & F_LIMIT_SLOT:  # its flight under a concurrency limit ends
            node.qlimits.release(job)
            flags = job.flags
        if flags & F_NACK_DELAYED and not nack:
            job.flags = flags & ~F_NACK_DELAYED
            count = messages.COUNT_NONE
        elif flags & F_BCAST_QUEUED or nack:
            job.flags = flags & ~F_NACK_DELAYED
            if nack:
                job.nacks += 1
                q = self.count_nack(job, q)
                count = messages.COUNT_NACK
            else:
                job.deliv += 1
                count = messages.COUNT_DELIVERY
            if job.extra.opts is not None and is_due(job):
                node.dead_letters.move(job)
                return True
        else:
            job.flags = flags | F_BCAST_QUEUED
            count = -1
        job.state = QUEUED
        if job.retry:
            job.flags |= F_BCAST_WILLQUEUE
            job.qtime = node.jobs.requeue_time(job)
        else:
            job.qtime = 0
        if count >= 0:
            node.cluster.send_to_copies(job, messages.Queued(job.id, count))
        node.jobs.update_awake(job)
        if q is None:
            q = self.queue_for(job.queue)
        q.push(job, node.now // 1000)
        if q.waiting and not q.flags & PAUSED_OUT:
            self.ready.append(q)
        return True

    def count_nack(self, job, q=None) -> Queue:
        """A NACK of ``job`` received here: its queue's and the node's
        counters.  Returns the queue (``q`` if given)."""
        if q is None:
            q = self.queue_for(job.queue)
        q.nacked += 1
        self.nacked += 1
        return q

    def enqueue_first(self, job) -> bool:
        """ENQUEUE a job as its first queueing on this node, not as a
        redelivery: no QUEUED broadcast and no counter bumped, and an
        at-most-once job (qtime 0) gets its one queueing.  For jobs that
        arrive to be queued (ENQUEUE from their creator, YOURJOBS) and a
        controlled restart."""
        if job.qtime == 0:
            job.qtime = 1
        job.flags &= ~F_BCAST_QUEUED
        queued = self.enqueue(job)
        job.flags |= F_BCAST_QUEUED
        return queued

    def dequeue(self, job) -> bool:
        """DEQUEUE(job): out of its queue, back to ACTIVE (its requeue time
        stays)."""
        if job.state != QUEUED:
            return False
        q = self._by_name.get(job.queue)
        job.state = ACTIVE
        if q is not None:
            q.remove(job)
            if not q.jobs:
                self._idle[q.name] = q
        return True

    def fetch(self, q: Queue, job=None):
        """Take the next job of ``q`` (or ``job``, one of its jobs) out for
        delivery: its state becomes ACTIVE."""
        job = q.pop(self.node.now // 1000, job)
        job.state = ACTIVE
        job.flags |= F_DELIVERED
        if not q.jobs:
            self._idle[q.name] = q
        return job

    # -- PAUSE --------------------------------------------------------------

    def set_pause(self, name: bytes, flags: int, update: bool) -> int:
        """QPAUSE state of ``name``, changed to ``flags`` if ``update``;
        returns the flags now in force."""
        q = self._by_name.get(name)
        if q is None and update and flags:
            q = self.queue_for(name)
        if q is not None and update:
            was_out = q.flags & PAUSED_OUT
            q.flags = flags
            if was_out and not flags & PAUSED_OUT and q.waiting and q.jobs:
                self.ready.append(q)
            if not flags:
                self._idle[q.name] = q
        return q.flags if q is not None else 0

    def broadcast_pause(self, name: bytes, flags: int) -> None:
        """PAUSE ... bcast: the queue's state to every reachable node."""
        self.node.cluster.broadcast(messages.Pause(name, flags), reachable_only=True)

    def on_pause(self, sender, msg) -> None:
        self.set_pause(msg.queue, msg.flags, True)

    def handlers(self):
        return {messages.Pause: self.on_pause}

    # -- Reclaiming ---------------------------------------------------------

    def maybe_idle(self, q: Queue) -> None:
        """``q`` may have become unused (no jobs, no clients, no flags)."""
        self._idle[q.name] = q

    def in_use(self, q: Queue) -> None:
        self._idle.pop(q.name, None)

    def reclaim_idle(self) -> None:
        """Drop the queues idle for ``QUEUE_MAX_IDLE`` seconds."""
        if not self._idle:
            return
        now_s = self.node.now // 1000
        for name, q in list(self._idle.items()):
            if q.jobs or q.waiting or q.flags or self._by_name.get(name) is not q:
                del self._idle[name]
            elif now_s - q.atime >= QUEUE_MAX_IDLE:
                del self._idle[name]
                self._by_name.pop(name)

    def drop_unused(self) -> None:
        """Drop every unused queue now, however recent (memory pressure)."""
        for name, q in list(self._idle.items()):
            if not q.jobs and not q.waiting and not q.flags and self._by_name.get(name) is q:
                del self._idle[name]
                self._by_name.pop(name)

    def clear(self) -> None:
        self._by_name.clear()
        self._idle.clear()
        self._job_defaults.clear()
        self._recent = (None, _DEAD)
        self.ready.clear()
