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
* a job loaded from the AOF (``F_LOADED``) is not queued before its
  WILLQUEUE went to every other copy that counts as reachable, over a
  link that is up, and ``WILLQUEUE_ADVANCE`` passed for their answers
  (SETACK for a job acknowledged elsewhere while this node was down, QUEUED
  for one queued there): its requeue time, long past after a restart,
  would otherwise queue it at once, before the node could hear of either.
"""

from .job import (
    ACKED, ACTIVE, F_BCAST_QUEUED, F_BCAST_WILLQUEUE, F_LOADED, LOADED_RECHECK, QUEUED, WILLQUEUE_ADVANCE
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

    def enqueue_jobs(self, ids, nack: bool) -> int:
        """ENQUEUE (or NACK: counts a negative acknowledgement instead of a
        delivery); returns how many active jobs were queued."""
        jobs = self._jobs
        enqueue = self._queues.enqueue
        n = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and job.state == ACTIVE and enqueue(job, nack):
                n += 1
        return n

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

    def on_queued(self, sender, msg) -> None:
        job = self._jobs.get(msg.job_id)
        if job is None or job.state == ACKED:
            return
        if job.state == QUEUED and sender > self.node.my_id:
            self._queues.dequeue(job)
        if msg.counter == messages.COUNT_NACK:
            job.nacks += 1
        elif msg.counter == messages.COUNT_DELIVERY:
            job.deliv += 1
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
                messages.Working: self.on_working}
