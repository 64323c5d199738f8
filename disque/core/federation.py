"""Federation: moving jobs to the nodes whose consumers want them.

A consumer finding a queue empty makes the node ask other nodes for jobs
(NEEDJOBS); a node with jobs in that queue answers with some of them
(YOURJOBS), which then are queued here as a move, not a redelivery.  Who is
asked, when, and how many jobs are served is the *policy*'s decision (an
``IFederationPolicy``, :mod:`disque.federation.default` for the original's
algorithm); this module only executes it.  ``policy`` is None on a node
that never federates.

A node that takes no new copies (past 75% of ``maxmemory``, or leaving:
REPLJOB's rule, :mod:`disque.core.memory`) neither asks for jobs nor keeps
the new ones a YOURJOBS brings: it hands them back.  An at-least-once job
still has its copy at the sender, which is asked to queue it again at once
(ENQUEUE); an at-most-once job's record is its only copy, so the record
goes back in a YOURJOBS.  The sender takes back, whatever its own memory,
the at-most-once jobs it handed to that node in the last
``RETURN_WINDOW_MS`` (it had their room a moment ago), so a refused job
travels there and back, and is never lost.  (A return slower than that to
a sender past the limit too goes back again, until one of them has room.)
A node past the limit thus grows by no job of a peer's but its own.

Counters: a job a YOURJOBS queues here counts as moved in (its queue's
``moved_in``, the node's), one handed to a peer as moved out; they are
also counted in the queue's jobs-in and jobs-out, so a queue's jobs out
are its deliveries plus its moves out.

Invariants: a leaving node never imports jobs; a job moved away keeps its
copy here (its requeue time protects it) unless it is at-most-once, which
is then only on the wire or over there, never in two queues; a node past
the memory limit registers no job a peer hands it, except its own
at-most-once jobs coming back.
"""

from collections import OrderedDict
from itertools import islice

from .job import ACTIVE, F_DELIVERED
from . import messages
from .queue import PAUSED_OUT

#: How long (ms) a node remembers the at-most-once jobs it handed to a
#: peer, to take them back if the peer cannot (a bus round trip is enough;
#: this allows for a slow peer).
RETURN_WINDOW_MS = 10_000


class Federation:
    def __init__(self, node):
        self.node = node
        self.policy = None  # an IFederationPolicy; None: never federate
        self._jobs = node.jobs
        self._queues = node.queues
        self._cluster = node.cluster
        # At-most-once jobs handed away in the last RETURN_WINDOW_MS, oldest
        # first: job ID -> (the peer's ID, ms).
        self._handed = OrderedDict()
        # Jobs moved, all queues (each queue counts its own: Queue.moved_in
        # and moved_out): queued here from a peer's YOURJOBS, handed to peers.
        self.moved_in = 0
        self.moved_out = 0

    def _full(self) -> bool:
        """Whether this node takes no new copies: REPLJOB's rule."""
        return self.node.memory.level > 0 or self._cluster.leaving

    def need_jobs(self, queue_name: bytes, reason: str) -> None:
        """A consumer found ``queue_name`` empty (``reason``: "waiting",
        "zero", "zero-blocked"): ask the policy whom to ask.  Leaving nodes
        never federate in, nor do nodes past the memory limit (they would
        hand the jobs back)."""
        cluster = self._cluster
        if self.policy is None or len(cluster.nodes) == 1 or self._full():
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
        """Clients still blocked: keep asking, at the policy's pace.  The
        at-most-once jobs handed away long ago are forgotten."""
        handed = self._handed
        if handed:
            oldest = self.node.now - RETURN_WINDOW_MS
            while handed and next(iter(handed.values()))[1] < oldest:
                handed.popitem(last=False)
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
                # never here too (unless it comes back: on_yourjobs).
                jobs.unregister(job)
                self._handed.pop(job.id, None)
                self._handed[job.id] = (sender, self.node.now)
            else:
                jobs.update_awake(job)  # our copy stays, with its requeue time
        self._queues.maybe_idle(q)
        if records:
            q.moved_out += len(records)
            self.moved_out += len(records)
            self._cluster.send(sender, messages.YourJobs(tuple(records)))

    def on_yourjobs(self, sender, msg) -> None:
        """Queue the jobs ``sender`` hands over, as a move.  Past the memory
        limit the ones not held here go back (see the module docstring)."""
        jobs = self._jobs
        full = self._full()
        imported = 0
        queue = None
        back = []
        for rec in msg.jobs:
            job = jobs.get(rec.id)
            taken_back = False
            if job is None:
                taken_back = self._taken_back(rec.id, sender)
                if full and not taken_back:
                    if rec.retry:
                        self._cluster.send(sender, messages.Enqueue(rec.id))  # its copy there: queued now
                    else:
                        back.append(rec)  # the only copy
                    continue
                job = jobs.from_record(rec, 1)
                jobs.add(job)
                jobs.log_added(job)
            else:
                job.merge_delivered((*rec.delivered, sender))
                if job.state != ACTIVE:
                    continue  # queued already, acked, or still replicating
                if job.retry == 0 and job.flags & F_DELIVERED:
                    continue  # at most once: we delivered it already
            if self._queues.enqueue_first(job):  # a move, not a redelivery
                self._queues.queue_for(job.queue).moved_in += 1
                self.moved_in += 1
            if job.retry:
                # postpone their requeue
                self._cluster.send_to_copies(job, messages.Queued(job.id, messages.COUNT_NONE))
            if not taken_back:  # (our own job back is no import: we still serve the queue)
                queue = job.queue
                imported += 1
        if back:
            self._cluster.send(sender, messages.YourJobs(tuple(back)))
        if imported and self.policy is not None:
            self.policy.received(self._queues.queue_for(queue), sender, imported, self.node.now)

    def _taken_back(self, job_id, sender) -> bool:
        """Whether ``job_id`` is an at-most-once job this node handed to
        ``sender`` in the last RETURN_WINDOW_MS (and now takes back)."""
        handed = self._handed.get(job_id)
        if handed is None or handed[0] != sender or self.node.now - handed[1] > RETURN_WINDOW_MS:
            return False
        del self._handed[job_id]
        return True

    def handlers(self):
        return {messages.NeedJobs: self.on_needjobs, messages.YourJobs: self.on_yourjobs}
