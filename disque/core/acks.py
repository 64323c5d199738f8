"""ACKJOB, FASTACK, DELJOB and the acknowledged jobs garbage collection.

An acknowledged job stays on the node, ACKED, until every node that may
hold a copy confirmed it knows (the spec's "Acknowledged jobs garbage
collection state machine", ack.c): the node sends SETACK to the copies that
did not confirm, each answers GOTACK, and once all did the node sends
DELJOB and forgets the job.  Attempts repeat with exponential backoff
(``GC_RETRY_MIN`` .. ``GC_RETRY_MAX``) until the TTL ends it all.  An ACK
for an unknown job creates a *dummy ACK* (no known copies) that asks every
node, so the job cannot come back from a copy this node never heard of.

Invariant: an ACKED job is never queued again, by this node or, once its
SETACK arrived, by any other.
"""

from .job import ACKED, F_LIMIT_SLOT, Job
from . import messages
from .jobid import is_at_most_once, ttl_minutes

GC_RETRY_MIN = 1000  # ms
GC_RETRY_MAX = 60000  # ms
GC_RETRY_COUNT_MAX = 16


class Acks:
    def __init__(self, node):
        self.node = node
        self._jobs = node.jobs
        self._cluster = node.cluster
        self._queues = node.queues
        self._to_ack = node.latency.add_to_ack
        self.acked = 0  # jobs acknowledged by clients here (ACKJOB, FASTACK)

    # -- Commands -------------------------------------------------------------

    def ack_jobs(self, ids) -> int:
        """ACKJOB: returns how many of ``ids`` were known and not yet acked."""
        node = self.node
        jobs = self._jobs
        cluster = self._cluster
        known = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is None:
                if cluster.size > 1 and not cluster.leaving and not is_at_most_once(job_id):
                    job = Job(job_id, None, None, ACKED, 0, 0,
                              node.now + ttl_minutes(job_id) * 60000, 0, 0, 0)
                    jobs.register(job)
            elif job.state != ACKED:
                self._count(job)
                self.acknowledge(job)
                known += 1
            if job is not None:
                self.try_gc(job)
        return known

    def fast_ack(self, ids) -> int:
        """FASTACK: DELJOB to every copy at once, no confirmation asked."""
        jobs = self._jobs
        cluster = self._cluster
        known = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is None:
                cluster.broadcast(messages.DelJob(job_id))
            else:
                if job.state != ACKED:
                    self._count(job)
                cluster.send_to_copies(job, messages.DelJob(job.id))
                jobs.unregister(job)
                known += 1
        return known

    def delete_jobs(self, ids) -> int:
        """DELJOB (the command): forget the jobs here only."""
        jobs = self._jobs
        evicted = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and jobs.unregister(job):
                evicted += 1
        return evicted

    def _count(self, job) -> None:
        """A client acknowledged ``job`` here: its queue's ``acked`` and
        the ADDJOB-to-ACK histogram."""
        self.acked += 1
        q = self._queues.get(job.extra.queue)  # (job.queue)
        if q is not None:
            q.acked += 1
        self._to_ack.observe(self.node.now - job.ctime // 1000000)

    # -- The state machine ----------------------------------------------------

    def acknowledge(self, job) -> None:
        """SET-ACK: the job is acked here (dequeued, never queued again)."""
        if job.state == ACKED:
            return
        self.node.queues.dequeue(job)
        job.state = ACKED
        if job.flags & F_LIMIT_SLOT:
            self.node.qlimits.release(job)
        self._jobs.acked += 1
        if job.extra.confirmed is not None:  # (job.confirmed) copies confirmed while replicating
            job.confirmed = None
        self._jobs.update_awake(job)
        self._jobs.log_deleted(job)

    def next_gc_time(self, job) -> int:
        period = GC_RETRY_MIN << job.extra.gc_retry  # (job.gc_retry)
        if period > GC_RETRY_MAX:
            period = GC_RETRY_MAX
        return self.node.now + period + self._jobs.jitter()

    def try_gc(self, job) -> None:
        """START-GC: forget the job if every copy confirmed, else SETACK."""
        if job.state != ACKED:
            return
        dummy = not job.delivered
        confirmed = job.extra.confirmed  # (job.confirmed)
        if confirmed is None:
            confirmed = {self.node.my_id}
        all_reached = not dummy and len(job.delivered) <= len(confirmed) and \
            all(n in confirmed for n in job.delivered)
        if all_reached or (dummy and self._cluster.size == 1):
            self._jobs.unregister(job)
            return
        # Not collected yet: the attempt and the confirmations are kept (a
        # job collected at its first attempt, the common case, never needs
        # them: it keeps no JobExtra).
        if job.gc_retry != GC_RETRY_COUNT_MAX:
            job.gc_retry += 1
        job.confirmed = confirmed
        self._send_setack(job)

    def _send_setack(self, job) -> None:
        """SETACK to the nodes that may have a copy and did not confirm; a
        dummy ACK (no known copies) asks everybody."""
        cluster = self._cluster
        if not job.delivered:
            cluster.broadcast(messages.SetAck(job.id, 0))
            return
        me = self.node.my_id
        confirmed = job.confirmed or ()
        msg = messages.SetAck(job.id, len(job.delivered))
        for node_id in job.delivered:
            if node_id != me and node_id not in confirmed:
                cluster.send(node_id, msg)

    # -- Bus messages ----------------------------------------------------------

    def on_setack(self, sender, msg) -> None:
        job = self._jobs.get(msg.job_id)
        if job is not None:
            self.acknowledge(job)
        cluster = self._cluster
        may_have = msg.may_have
        gotack = False
        if job is None or len(job.delivered) <= may_have:
            cluster.send(sender, messages.GotAck(msg.job_id, job is not None))
            gotack = job is not None
        if job is not None and (len(job.delivered) > may_have or may_have == 0):
            if may_have == 0 and not gotack:
                cluster.send(sender, messages.GotAck(msg.job_id, True))
            self.try_gc(job)

    def on_gotack(self, sender, msg) -> None:
        job = self._jobs.get(msg.job_id)
        if job is None:
            return
        self.acknowledge(job)
        known = msg.known
        if known and job.delivered and sender not in job.delivered:
            job.delivered = (*job.delivered, sender)
        # Every answer counts: a copy confirms, and a dummy ACK (no known
        # copies) counts "unknown" too, so that once the whole cluster said
        # so it can go (step 7 of GOTACK).
        if job.confirmed is None:
            job.confirmed = {self.node.my_id}
        job.confirmed.add(sender)
        confirmed = job.confirmed or ()
        if job.delivered and all(n in confirmed for n in job.delivered):
            self._cluster.send_to_copies(job, messages.DelJob(job.id))
            self._jobs.unregister(job)
        elif not job.delivered and (known or len(confirmed) >= self._cluster.size):
            self._jobs.unregister(job)

    def on_deljob(self, sender, msg) -> None:
        job = self._jobs.get(msg.job_id)
        if job is not None:
            self._jobs.unregister(job, void=msg.void)

    def handlers(self):
        return {messages.SetAck: self.on_setack, messages.GotAck: self.on_gotack, messages.DelJob: self.on_deljob}
