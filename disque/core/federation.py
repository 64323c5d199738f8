"""Federation: moving jobs to the nodes whose consumers want them.

A consumer finding a queue empty makes the node ask other nodes for jobs
(NEEDJOBS); a node with jobs in that queue answers with some of them
(YOURJOBS), which then are queued here as a move, not a redelivery.  Who is
asked, when, and how many jobs are served is the *policy*'s decision (an
``IFederationPolicy``, :mod:`disque.federation.default` for the original's
algorithm); this module only executes it.  ``policy`` is None on a node
that never federates.

Invariants: a leaving node never imports jobs; a job moved away keeps its
copy here (its requeue time protects it) unless it is at-most-once, which
is then only on the wire or over there, never in two queues.
"""

from itertools import islice

from .job import ACTIVE, F_DELIVERED
from . import messages
from .queue import PAUSED_OUT


class Federation:
    def __init__(self, node):
        self.node = node
        self.policy = None  # an IFederationPolicy; None: never federate
        self._jobs = node.jobs
        self._queues = node.queues
        self._cluster = node.cluster

    def need_jobs(self, queue_name: bytes, reason: str) -> None:
        """A consumer found ``queue_name`` empty (``reason``: "waiting",
        "zero", "zero-blocked"): ask the policy whom to ask.  Leaving nodes
        never federate in."""
        cluster = self._cluster
        if self.policy is None or cluster.leaving or len(cluster.nodes) == 1:
            return
        q = self._queues.queue_for(queue_name)
        peers = cluster.active_peers()
        waiting = len(q.waiting) if q.waiting else 0
        for targets, count in self.policy.wanted(q, self.node.now, reason, peers, waiting):
            if count > 0:
                msg = messages.NeedJobs(queue_name, count)
                for node_id in targets:
                    cluster.send(node_id, msg)

    def cron(self) -> None:
        """Clients still blocked: keep asking, at the policy's pace."""
        if self.policy is None:
            return
        seen = set()
        for b in self.node.getjob.clients():
            for q in b.queues:
                if q.name not in seen and not q.jobs:
                    seen.add(q.name)
                    self.need_jobs(q.name, "waiting")

    def on_needjobs(self, sender, msg) -> None:
        q = self._queues.get(msg.queue)
        if q is None or not q.jobs or q.flags & PAUSED_OUT or self.policy is None:
            return
        peer = self._cluster.nodes.get(sender)
        if peer is None or not peer.connected:
            return  # no link to answer on: jobs sent now would be lost in transit
        n = self.policy.to_serve(q, sender, msg.count, self.node.now)
        if n <= 0:
            return
        jobs = self._jobs
        records = []
        if peer.extensions:
            picked = [None] * min(n, len(q.jobs))  # the head, n times
        else:
            # A node of the previous version would drop a job's options: it
            # gets the first n jobs without any (a scan, during upgrades only).
            picked = list(islice((j for j in q.jobs if j.extra.opts is None), n))
        for job in picked:
            delivered_before = (q.jobs[0] if job is None else job).flags & F_DELIVERED
            job = self._queues.fetch(q, job)
            if not delivered_before:
                job.flags &= ~F_DELIVERED  # moved, not delivered by us
            if sender not in job.delivered:
                job.delivered = (*job.delivered, sender)
            records.append(jobs.record(job))
            if job.retry == 0:
                # At most once: from now on it is on the wire or over there,
                # never here too.
                jobs.unregister(job)
            else:
                jobs.update_awake(job)  # our copy stays, with its requeue time
        self._queues.maybe_idle(q)
        if records:
            self._cluster.send(sender, messages.YourJobs(tuple(records)))

    def on_yourjobs(self, sender, msg) -> None:
        jobs = self._jobs
        imported = 0
        name = None
        for rec in msg.jobs:
            name = rec.queue
            job = jobs.get(rec.id)
            if job is None:
                job = jobs.from_record(rec, 1)
                jobs.add(job)
                jobs.log_added(job)
            else:
                job.merge_delivered((*rec.delivered, sender))
                if job.state != ACTIVE:
                    continue  # queued already, acked, or still replicating
                if job.retry == 0 and job.flags & F_DELIVERED:
                    continue  # at most once: we delivered it already
            self._queues.enqueue_first(job)  # a move, not a redelivery
            if job.retry:
                # postpone their requeue
                self._cluster.send_to_copies(job, messages.Queued(job.id, messages.COUNT_NONE))
            imported += 1
        if imported and self.policy is not None:
            self.policy.received(self._queues.queue_for(name), sender, imported, self.node.now)

    def handlers(self):
        return {messages.NeedJobs: self.on_needjobs, messages.YourJobs: self.on_yourjobs}
