"""The job re-queueing state machine and the job processing tick.

A delivered job that nobody acknowledges is queued again RETRY seconds
later, by whichever node holding a copy gets there first: 500 ms before
its requeue time a node sends WILLQUEUE to the other copies (a copy that
already queued it or has it acked answers, which postpones or ends it),
and queueing it sends QUEUED, which postpones every other copy's own
requeue.  NACK, ENQUEUE, DEQUEUE and WORKING are the client's levers on the
same machine.  ``process_job`` is the original's ``processJob``: what is
due for a job at its awake time (TTL, WILLQUEUE, requeue, GC retry).

Invariants:

* TTL always wins: a job whose ``etime`` passed is forgotten before
  anything else happens to it;
* a RETRY 0 (at-most-once) job is never queued again by the node itself;
* a job queued on two nodes at once is dequeued on the one whose ID is
  lower when QUEUED crosses (the original's tie break);
* a NACK with a delay (``NACK ... DELAY ms`` or the job's BACKOFF, an
  extension: docs/extensions.md) keeps the job active until ``qtime`` on
  the node that got it, with ``F_NACK_DELAYED`` (that requeue counts
  nothing more); NACKDELAY tells the other copies, which count the NACK and
  wait RETRY past that time, and the NACKing node answers a WILLQUEUE with
  it again, and a QUEUED too (from a copy it did not know of, handed on by
  YOURJOBS, or one whose QUEUED crossed the NACK): no copy queues the job
  before its time while the two can talk;
* a job loaded from the AOF (``F_LOADED``) is not queued before its
  WILLQUEUE went to every other copy that counts as reachable, over a
  link that is up, and ``WILLQUEUE_ADVANCE`` passed for their answers
  (SETACK for a job acknowledged elsewhere while this node was down, QUEUED
  for one queued there): its requeue time, long past after a restart,
  would otherwise queue it at once, before the node could hear of either.
"""

from .deadletter import is_due
from .job import (
    ACKED, ACTIVE, F_BCAST_QUEUED, F_BCAST_WILLQUEUE, F_DELIVERED, F_LIMIT_SLOT, F_LOADED, F_NACK_DELAYED,
    LOADED_RECHECK, QUEUED, WILLQUEUE_ADVANCE
)
from . import messages
from .errors import CommandError
from .queue import PAUSED_IN


class Requeue:
    def __init__(self, node):
        self.node = node
        self._jobs = node.jobs
        self._queues = node.queues
        self._cluster = node.cluster

    # -- Job processing (processJob) ---------------------------------------

    def process_job(self, job) -> None:
        """Everything due for ``job`` at its awake time, then its next one."""
        node = self.node
        now = node.now
        jobs = self._jobs
        if job.etime <= now:
            jobs.unregister(job)
            return
        state = job.state
        if (state == ACTIVE or state == QUEUED) and job.flags & F_BCAST_WILLQUEUE \
                and job.qtime - WILLQUEUE_ADVANCE <= now:
            if job.flags & F_LOADED and state == ACTIVE:
                if self._cluster.copies_unheard(job):  # look again soon
                    job.qtime = now + LOADED_RECHECK + WILLQUEUE_ADVANCE
                    jobs.update_awake(job)
                    return
                job.flags &= ~F_LOADED
                if job.qtime < now + WILLQUEUE_ADVANCE:  # time for the answers
                    job.qtime = now + WILLQUEUE_ADVANCE
            if state != QUEUED:
                self._cluster.send_to_copies(job, messages.WillQueue(job.id))
            job.flags &= ~F_BCAST_WILLQUEUE
        if job.state == ACTIVE and job.qtime and job.qtime <= now:
            q = self._queues.get(job.queue)
            if job.retry != 0 and q is not None and q.flags & PAUSED_IN:
                job.qtime = jobs.requeue_time(job)
            else:
                self._queues.enqueue(job)
        if job.state == QUEUED and job.qtime and job.qtime <= now and job.retry:
            job.flags |= F_BCAST_WILLQUEUE
            job.qtime = jobs.requeue_time(job)
        if job.state == ACKED:
            node.acks.try_gc(job)
            if job.id not in jobs:
                return
        jobs.update_awake(job)

    # -- ENQUEUE / NACK / DEQUEUE / WORKING commands -------------------------

    def enqueue_jobs(self, ids) -> int:
        """ENQUEUE: queue the active jobs now (a delayed NACK's wait ends);
        returns how many were queued.  NACK is :meth:`nack_jobs`."""
        jobs = self._jobs
        enqueue = self._queues.enqueue
        n = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and job.state == ACTIVE and enqueue(job):
                n += 1
        return n

    def nack_jobs(self, ids, delay=None) -> int:
        """NACK: queue the active jobs again, at once or after ``delay`` ms
        (``NACK ... DELAY``; without it a job's BACKOFF, if any, decides).
        Returns how many were queued, delayed or dead-lettered.  A delay is
        refused (before any job changes) for a job with a copy on a node of
        the previous version, which could not honour it."""
        jobs = self._jobs
        if delay:
            for job_id in ids:
                job = jobs.get(job_id)
                if job is not None and not self._cluster.all_read_extensions(job.delivered):
                    raise CommandError(b"ERR", b"NACK DELAY needs every node with a copy of the job to support it; "
                                               b"job " + job_id + b" has a copy on a node of an older version")
        enqueue = self._queues.enqueue
        rng = self.node.rng.random
        n = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is None or job.state != ACTIVE:
                continue
            wait = delay
            if wait is None:
                opts = job.extra.opts
                wait = opts.backoff_delay(job.nacks + 1, rng) if opts is not None and opts.backoff else 0
            if wait > 0:
                if self.nack_later(job, wait):
                    n += 1
            elif enqueue(job, True):
                n += 1
        return n

    def nack_later(self, job, delay: int) -> bool:
        """NACK ``job`` (active here) and queue it again ``delay`` ms from
        now: the NACK counts now (and may make it a dead letter), the
        copies hear NACKDELAY, the AOF gets the new requeue time."""
        if job.qtime == 0 or job.retry == 0 and job.flags & F_DELIVERED:
            return False  # as enqueue(): at most once
        node = self.node
        job.nacks += 1
        self._queues.count_nack(job)
        if job.extra.opts is not None and is_due(job):
            node.dead_letters.move(job)
            return True
        until = node.now + delay
        job.flags |= F_NACK_DELAYED | F_BCAST_QUEUED | (F_BCAST_WILLQUEUE if job.retry else 0)
        job.qtime = until
        self._jobs.update_awake(job)
        self._cluster.send_to_copies(job, messages.NackDelay(job.id, until, True))
        self._jobs.log_added(job)
        return True

    def dequeue_jobs(self, ids) -> int:
        jobs = self._jobs
        dequeue = self._queues.dequeue
        n = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and job.state == QUEUED and dequeue(job):
                n += 1
        return n

    def working(self, job_id: bytes) -> int:
        """WORKING: postpone the next delivery by RETRY, here and on every
        copy; refused once half the TTL is gone.  Returns RETRY."""
        job = self._jobs.get(job_id)
        if job is None:
            raise CommandError(b"NOJOB", b"Job not known in the context of this node.")
        if job.state == ACKED:
            return job.retry  # as the original: nothing left to postpone
        created = job.created_ms()
        ttl = job.etime - created
        if ttl > 0 and self.node.now - created > ttl // 2:
            raise CommandError(b"TOOLATE", b"Half of job TTL already elapsed, you are no longer allowed to postpone the next delivery.")
        if job.state == QUEUED:
            self._queues.dequeue(job)
        self._jobs.postpone(job)
        self._cluster.send_to_copies(job, messages.Working(job.id))
        return job.retry

    # -- Bus messages ------------------------------------------------------------

    def on_willqueue(self, sender, msg) -> None:
        job = self._jobs.get(msg.job_id)
        if job is None:
            return
        if job.delivered:
            job.merge_delivered((sender,))
        if job.state == QUEUED:
            self._cluster.send_to_copies(job, messages.Queued(job.id, messages.COUNT_NONE))
        elif job.state == ACKED:
            self._cluster.send(sender, messages.SetAck(job.id, len(job.delivered)))
        elif job.flags & F_NACK_DELAYED and job.qtime > self.node.now:
            # The sender missed (or crossed) our NACKDELAY: it must wait too.
            self._cluster.send(sender, messages.NackDelay(job.id, job.qtime, False))

    def on_nackdelay(self, sender, msg) -> None:
        """A copy was NACKed with a delay on ``sender``: count the NACK
        (unless this repeats one) and requeue only RETRY after its time.

        The sender reached the copies it knows of; a node this one handed
        the job to (YOURJOBS) may not be among them, and would serve the
        job before its time.  So the NACK itself (``count``) is passed on
        to this node's other copies, as a repeat (not counted again there,
        not passed on further): every node the job went through hears it."""
        job = self._jobs.get(msg.job_id)
        if job is None or job.state == ACKED:
            return
        if msg.count:
            me = self.node.my_id
            repeat = messages.NackDelay(job.id, msg.until, False)
            for node_id in job.delivered:
                if node_id != sender and node_id != me:
                    self._cluster.send(node_id, repeat)
        if job.state == QUEUED:
            self._queues.dequeue(job)
        elif job.flags & F_LIMIT_SLOT:  # NACKed elsewhere: its flight here ends
            self.node.qlimits.release(job)
        if msg.count:
            job.nacks += 1
        if job.retry:
            job.flags |= F_BCAST_QUEUED | F_BCAST_WILLQUEUE
            qtime = min(msg.until, job.etime) + job.retry * 1000 + self._jobs.jitter()
            if msg.count or qtime > job.qtime:  # an answer to our WILLQUEUE only ever postpones
                self._jobs.set_requeue_time(job, qtime)
        self._jobs.log_added(job)

    def on_queued(self, sender, msg) -> None:
        """``sender`` queued the job: it holds a copy (a node it was handed
        to by YOURJOBS may be news here), and our own requeue waits.  If a
        NACK with a delay holds the job here, the sender queued it too
        early (it missed the NACKDELAY, or the NACK crossed its QUEUED):
        tell it, as for a WILLQUEUE."""
        job = self._jobs.get(msg.job_id)
        if job is None or job.state == ACKED:
            return
        if job.delivered:
            job.merge_delivered((sender,))
        if msg.counter == messages.COUNT_NACK:
            job.nacks += 1
        elif msg.counter == messages.COUNT_DELIVERY:
            job.deliv += 1
        if job.flags & F_NACK_DELAYED and job.qtime > self.node.now:
            self._cluster.send(sender, messages.NackDelay(job.id, job.qtime, False))
            return  # our requeue stays at the delay's end
        if job.state == QUEUED and sender > self.node.my_id:
            self._queues.dequeue(job)
        elif job.flags & F_LIMIT_SLOT:  # queued again elsewhere: its flight here ends
            self.node.qlimits.release(job)
        if job.retry:
            job.flags |= F_BCAST_QUEUED
            self._jobs.postpone(job)

    def on_working(self, sender, msg) -> None:
        job = self._jobs.get(msg.job_id)
        if job is None or job.state == ACKED:
            return
        if job.state == QUEUED:
            self._queues.dequeue(job)
        if job.retry:
            self._jobs.postpone(job)

    def handlers(self):
        return {messages.WillQueue: self.on_willqueue, messages.Queued: self.on_queued,
                messages.Working: self.on_working, messages.NackDelay: self.on_nackdelay}
