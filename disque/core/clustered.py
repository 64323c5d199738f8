"""NodeState's cluster side: bus messages in, bus messages out.

:class:`ClusterMixin` is mixed into :class:`disque.core.node.NodeState`; it
keeps the local state machine in ``node.py`` readable as the spec's
"Generic functions" and puts the message-driven parts here, section by
section as ``seeds/disque-readme.txt`` names them.  Every handler runs at
``self.now`` and reports what to send as effects in ``self.outbox``.
"""

from heapq import heappop, heappush

from . import job as J
from . import messages as M
from .cluster import new_node_id
from .effects import Persist, Reply
from .queue import PAUSED_OUT

CRON_PERIOD_MS = 100
REPL_RETRY_MS = 50  # one more node every 50 ms while copies are missing


class ClusterMixin:
    # ------------------------------------------------------------------
    # Membership (delegated to ClusterView) and the bus entry points
    # ------------------------------------------------------------------

    def meet(self, host: bytes, port: int) -> None:
        self.cluster.meet(host, port, self.now, explicit=True)

    def forget(self, node_id: bytes) -> bool:
        return self.cluster.forget(node_id, self.now)

    def cluster_reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every peer; HARD also takes a new ID and
        drops every job and queue (a fresh node)."""
        if hard:
            new_id = new_node_id()
            self.flush_all()
            self.cluster.reset(new_id)
            self.ids.set_node_id(new_id)
            self._my_delivered = (new_id,)
        else:
            self.cluster.reset()

    def link_up(self, node_id: bytes) -> None:
        self.cluster.link_up(node_id, self.now)

    def link_down(self, node_id: bytes) -> None:
        self.cluster.link_down(node_id)

    def bus_receive(self, header: M.Header, msg, link) -> None:
        """One message from the bus.  ``link`` is the adapter's connection
        (opaque here but for ``node_id``, ``peer_host`` and ``local_host``)."""
        known = self.cluster.receive(header, msg, link, self.now)
        if not known:
            return
        handler = self._HANDLERS.get(type(msg))
        if handler is not None:
            handler(self, header.sender, msg)
            if self.ready:  # jobs came in (YOURJOBS, ENQUEUE, ...) for blocked clients
                self.serve_ready()

    def cluster_cron(self) -> None:
        if self.now - self._last_cron >= CRON_PERIOD_MS:
            self._last_cron = self.now
            self.cluster.cron(self.now)
            if self.federation is not None and self._blocked:
                self._federate_waiting()

    def set_leaving(self, leaving: bool) -> None:
        self.cluster.set_leaving(leaving)

    # ------------------------------------------------------------------
    # Job replication state machine
    # ------------------------------------------------------------------

    def job_record(self, job) -> M.JobRecord:
        return M.JobRecord(job.id, job.queue, job.body, job.repl, job.ctime, job.etime, job.delay,
                           job.retry, job.nacks, job.deliv, tuple(job.delivered), job.dedup or b"")

    def job_from_record(self, rec, qtime: int):
        """A new ACTIVE job from a REPLJOB / YOURJOBS record (not yet
        registered): counters, the nodes that may hold it (this one
        included), its DEDUP key, the queue name shared with an existing
        queue."""
        q = self.queues.get(rec.queue)
        job = J.Job(rec.id, q.name if q is not None else rec.queue, rec.body, J.ACTIVE, rec.repl, rec.ctime,
                    rec.etime, rec.delay, rec.retry, qtime)
        job.nacks = rec.nacks
        job.deliv = rec.deliv
        job.delivered = rec.delivered if self.my_id in rec.delivered else (*rec.delivered, self.my_id)
        if rec.dedup:
            job.dedup = rec.dedup
        return job

    def _replication_targets(self, exclude, count):
        """Up to ``count`` reachable, non-leaving peers not in ``exclude``,
        shuffled (the original's replication order)."""
        peers = [n for n in self.cluster.active_peers() if n not in exclude]
        self.rng.shuffle(peers)
        return peers[:count]

    def replicate_new_job(self, job, additional: int, extrepl: bool, async_: bool, q) -> None:
        """ADDJOB steps 1-2: the job (already registered) waits for
        ``additional`` copies on other nodes.  With ``extrepl`` (leaving or
        low on memory) this node keeps no copy of its own."""
        me = self.my_id
        targets = self._replication_targets((), additional)
        job.delivered = tuple(targets) if extrepl else (me, *targets)
        job.flags |= J.F_EXTREPL if extrepl else 0
        pending = Replication(job, additional, self.now)
        if not async_:
            job.confirmed = pending.confirmed  # SHOW lists them while it waits
        self._replicating[job.id] = pending
        record = self.job_record(job)
        for node_id in targets:
            self.cluster.send(node_id, M.ReplJob(record))
        self._repl_wakeup(pending)
        if async_:
            # ASYNC: the client gets its ID now and the job is queued at once
            # (locally, unless this node keeps no copy); copies go on in the
            # background, with no timeout but the TTL.
            pending.async_ = True
            self._activate(job, q)
        else:
            self.update_awake(job)  # TTL: a stuck replication cannot outlive it

    def await_replication(self, job, handle, timeout_ms: int, ok_payload, fail_payload) -> None:
        """Block the ADDJOB client until the copies are confirmed (``Reply``
        to ``handle`` with ``ok_payload``) or ``timeout_ms`` passes
        (``fail_payload``; 0 = no timeout but the job's TTL)."""
        pending = self._replicating[job.id]
        if pending.handle is not None:
            # A repeated ADDJOB (same DEDUP key) while the first one waits:
            # it gets the first one's outcome, whatever its own timeout.
            if pending.also is None:
                pending.also = []
            pending.also.append(handle)
            return
        pending.handle = handle
        pending.ok = ok_payload
        pending.fail = fail_payload
        if timeout_ms:
            pending.deadline = self.now + timeout_ms
            self._repl_wakeup(pending, pending.deadline)

    def _repl_wakeup(self, pending, at=None) -> None:
        self._repl_seq += 1
        heappush(self._repl_timers, (at or self.now + REPL_RETRY_MS, self._repl_seq, pending))
        self._timers_added = True

    def _activate(self, job, q=None) -> None:
        """The job reached its replication level (or is ASYNC): active, and
        queued here or, without a local copy, on one confirmed node."""
        if job.state == J.WAIT_REPL:
            job.state = J.ACTIVE
        if job.flags & J.F_EXTREPL:
            return
        if job.delay == 0:
            self.enqueue(job, False, q)
        else:
            self.update_awake(job)
        if self.persist:
            self.outbox.append(Persist((b"LOADJOB", job)))

    def _on_gotjob(self, sender, msg) -> None:
        pending = self._replicating.get(msg.job_id)
        if pending is None:
            return
        job = pending.job
        pending.confirmed.add(sender)
        if sender not in job.delivered:
            job.delivered = (*job.delivered, sender)
        if len(pending.confirmed) < pending.needed:
            return
        del self._replicating[job.id]
        pending.done = True
        if job.confirmed is pending.confirmed:
            job.confirmed = None
        if not pending.async_:
            self._activate(job)
            pending.reply(self.outbox, pending.ok)
        if job.flags & J.F_EXTREPL:
            # Not ours to keep: one of the copies queues it, we forget it.
            if job.delay == 0:
                copies = [n for n in job.delivered if n != self.my_id]
                self.cluster.send(self.rng.choice(copies), M.Enqueue(job.id))
            self.unregister(job)

    def _replication_timers(self) -> None:
        heap = self._repl_timers
        now = self.now
        while heap and heap[0][0] <= now:
            _, _, pending = heappop(heap)
            if pending.done:
                continue
            job = pending.job
            if pending.deadline and now >= pending.deadline or self.jobs.get(job.id) is not job:
                self._replication_failed(pending)
                continue
            if now - pending.last_step >= REPL_RETRY_MS:
                pending.last_step = now
                # One more node every 50 ms, and REPLJOB again to every node
                # that may have a copy, with the updated delivered list.
                extra = self._replication_targets(job.delivered, 1)
                if extra:
                    job.delivered = (*job.delivered, extra[0])
                record = self.job_record(job)
                for node_id in job.delivered:
                    if node_id != self.my_id and node_id not in pending.confirmed:
                        self.cluster.send(node_id, M.ReplJob(record))
            self._repl_wakeup(pending)

    def _replication_failed(self, pending) -> None:
        """ms-timeout reached: NOREPL to the client, best-effort delete of
        the copies.  An ASYNC job whose copies never came stays as it is."""
        pending.done = True
        self._replicating.pop(pending.job.id, None)
        job = pending.job
        if pending.async_:
            return
        pending.reply(self.outbox, pending.fail)
        for node_id in job.delivered:
            if node_id != self.my_id:
                self.cluster.send(node_id, M.DelJob(job.id, void=True))
        if self.jobs.get(job.id) is job:
            self.unregister(job)

    def _on_repljob(self, sender, msg) -> None:
        rec = msg.job
        job = self.jobs.get(rec.id)
        if job is not None:
            if job.state != J.ACKED:
                self._merge_delivered(job, rec.delivered)
                self.cluster.send(sender, M.GotJob(rec.id))
            return
        if self.memory_level > 0 or self.cluster.leaving:
            return  # no GOTJOB: the sender tries another node
        job = self.job_from_record(
            rec, (self.now + (rec.delay + rec.retry) * 1000 + self._jitter()) if rec.retry else 0)
        # A copy's first queueing is a re-queue: broadcast QUEUED, count it.
        job.flags = J.F_BCAST_QUEUED | (J.F_BCAST_WILLQUEUE if rec.retry else 0)
        self.register(job)
        if self.persist:
            self.outbox.append(Persist((b"LOADJOB", job)))
        self.cluster.send(sender, M.GotJob(rec.id))

    def _on_enqueue(self, sender, msg) -> None:
        job = self.jobs.get(msg.job_id)
        if job is None or job.state != J.ACTIVE:
            return
        self.enqueue_first(job)  # asked by the creator, which keeps no copy

    # ------------------------------------------------------------------
    # Job re-queueing state machine
    # ------------------------------------------------------------------

    def _send_to_copies(self, job, msg) -> None:
        me = self.my_id
        for node_id in job.delivered:
            if node_id != me:
                self.cluster.send(node_id, msg)

    def cluster_queued(self, job, nack: bool) -> None:
        self._send_to_copies(job, M.Queued(job.id, M.COUNT_NACK if nack else M.COUNT_DELIVERY))

    def cluster_willqueue(self, job) -> None:
        self._send_to_copies(job, M.WillQueue(job.id))

    def cluster_working(self, job) -> None:
        self._send_to_copies(job, M.Working(job.id))

    def _merge_delivered(self, job, node_ids) -> None:
        """Nodes that showed they have a copy join ``job.delivered``, so
        QUEUED, SETACK and DELJOB reach them too."""
        merged = tuple(dict.fromkeys((*job.delivered, *node_ids)))
        if merged != job.delivered:
            job.delivered = merged

    def _on_willqueue(self, sender, msg) -> None:
        job = self.jobs.get(msg.job_id)
        if job is None:
            return
        if job.delivered:
            self._merge_delivered(job, (sender,))
        if job.state == J.QUEUED:
            self._send_to_copies(job, M.Queued(job.id, M.COUNT_NONE))
        elif job.state == J.ACKED:
            self.cluster.send(sender, M.SetAck(job.id, len(job.delivered)))

    def _on_queued(self, sender, msg) -> None:
        job = self.jobs.get(msg.job_id)
        if job is None or job.state == J.ACKED:
            return
        if job.state == J.QUEUED and sender > self.my_id:
            self.dequeue(job)
        if msg.counter == M.COUNT_NACK:
            job.nacks += 1
        elif msg.counter == M.COUNT_DELIVERY:
            job.deliv += 1
        if job.retry:
            job.flags |= J.F_BCAST_WILLQUEUE | J.F_BCAST_QUEUED
            self.set_requeue_time(job, self.requeue_time(job))

    def _on_working(self, sender, msg) -> None:
        job = self.jobs.get(msg.job_id)
        if job is None or job.state == J.ACKED:
            return
        if job.state == J.QUEUED:
            self.dequeue(job)
        if job.retry:
            job.flags |= J.F_BCAST_WILLQUEUE
            self.set_requeue_time(job, self.requeue_time(job))

    # ------------------------------------------------------------------
    # Acknowledged jobs garbage collection state machine
    # ------------------------------------------------------------------

    def cluster_setack(self, job) -> None:
        """START-GC: SETACK to the nodes that may have a copy and did not
        confirm; a dummy ACK (no known copies) asks everybody."""
        if not job.delivered:
            self.cluster.broadcast(M.SetAck(job.id, 0))
            return
        confirmed = job.confirmed or ()
        msg = M.SetAck(job.id, len(job.delivered))
        for node_id in job.delivered:
            if node_id != self.my_id and node_id not in confirmed:
                self.cluster.send(node_id, msg)

    def cluster_deljob(self, job) -> None:
        self._send_to_copies(job, M.DelJob(job.id))

    def cluster_deljob_broadcast(self, job_id: bytes) -> None:
        self.cluster.broadcast(M.DelJob(job_id))

    def _on_setack(self, sender, msg) -> None:
        job = self.jobs.get(msg.job_id)
        if job is not None:
            self.acknowledge(job)
        may_have = msg.may_have
        gotack = False
        if job is None or len(job.delivered) <= may_have:
            self.cluster.send(sender, M.GotAck(msg.job_id, job is not None))
            gotack = job is not None
        if job is not None and (len(job.delivered) > may_have or may_have == 0):
            if may_have == 0 and not gotack:
                self.cluster.send(sender, M.GotAck(msg.job_id, True))
            self.try_gc(job)

    def _on_gotack(self, sender, msg) -> None:
        job = self.jobs.get(msg.job_id)
        if job is None:
            return
        self.acknowledge(job)
        known = msg.known
        if known and job.delivered and sender not in job.delivered:
            job.delivered = (*job.delivered, sender)
        # A dummy ACK (no known copies) counts every answer, so that once the
        # whole cluster said "unknown" it can go (step 7 of GOTACK).
        if known or job.delivered or sender in job.delivered or not job.delivered:
            if job.confirmed is None:
                job.confirmed = {self.my_id}
            job.confirmed.add(sender)
        confirmed = job.confirmed or ()
        if job.delivered and all(n in confirmed for n in job.delivered):
            self._send_to_copies(job, M.DelJob(job.id))
            self.unregister(job)
        elif not job.delivered and (known or len(confirmed) >= self.cluster.size):
            self.unregister(job)

    def _on_deljob(self, sender, msg) -> None:
        job = self.jobs.get(msg.job_id)
        if job is not None:
            self.unregister(job, void=msg.void)

    # ------------------------------------------------------------------
    # PAUSE ... bcast, federation
    # ------------------------------------------------------------------

    def cluster_pause(self, queue_name: bytes, flags: int) -> None:
        """PAUSE ... bcast: propagate the queue state to reachable nodes."""
        self.cluster.broadcast(M.Pause(queue_name, flags), reachable_only=True)

    def _on_pause(self, sender, msg) -> None:
        self.set_pause(msg.queue, msg.flags, True)

    # ------------------------------------------------------------------
    # Federation (NEEDJOBS / YOURJOBS); the policy decides, we execute
    # ------------------------------------------------------------------

    def need_jobs(self, queue_name: bytes, reason: str) -> None:
        """A consumer found ``queue_name`` empty: ask the policy whom to
        ask.  Leaving nodes never federate in."""
        cluster = self.cluster
        if self.federation is None or cluster.leaving or len(cluster.nodes) == 1:
            return
        q = self.queue_for(queue_name)
        peers = cluster.active_peers()
        waiting = len(q.waiting) if q.waiting else 0
        for targets, count in self.federation.wanted(q, self.now, reason, peers, waiting):
            if count > 0:
                msg = M.NeedJobs(queue_name, count)
                for node_id in targets:
                    cluster.send(node_id, msg)

    def _federate_waiting(self) -> None:
        """Clients still blocked: keep asking, at the policy's pace."""
        seen = set()
        for b in list(self._blocked.values()):
            for q in b.queues:
                if q.name not in seen and not q.jobs:
                    seen.add(q.name)
                    self.need_jobs(q.name, "waiting")

    def _on_needjobs(self, sender, msg) -> None:
        q = self.queues.get(msg.queue)
        if q is None or not q.jobs or q.flags & PAUSED_OUT or self.federation is None:
            return
        peer = self.cluster.nodes.get(sender)
        if peer is None or not peer.connected:
            return  # no link to answer on: jobs sent now would be lost in transit
        n = self.federation.to_serve(q, sender, msg.count, self.now)
        if n <= 0:
            return
        records = []
        for _ in range(min(n, len(q.jobs))):
            delivered_before = q.jobs[0].flags & J.F_DELIVERED
            job = self.fetch(q)
            if not delivered_before:
                job.flags &= ~J.F_DELIVERED  # moved, not delivered by us
            if sender not in job.delivered:
                job.delivered = (*job.delivered, sender)
            records.append(self.job_record(job))
            if job.retry == 0:
                # At most once: from now on it is on the wire or over there,
                # never here too.
                self.unregister(job)
            else:
                self.update_awake(job)  # our copy stays, with its requeue time
        self._idle_queues[q.name] = q
        self.cluster.send(sender, M.YourJobs(tuple(records)))

    def _on_yourjobs(self, sender, msg) -> None:
        imported = 0
        name = None
        for rec in msg.jobs:
            name = rec.queue
            job = self.jobs.get(rec.id)
            if job is None:
                job = self.job_from_record(rec, 1)
                self.table_add(job)
                if self.persist:
                    self.outbox.append(Persist((b"LOADJOB", job)))
            else:
                self._merge_delivered(job, (*rec.delivered, sender))
                if job.state != J.ACTIVE:
                    continue  # queued already, acked, or still replicating
                if job.retry == 0 and job.flags & J.F_DELIVERED:
                    continue  # at most once: we delivered it already
            self.enqueue_first(job)  # a move, not a redelivery
            if job.retry:
                self._send_to_copies(job, M.Queued(job.id, M.COUNT_NONE))  # postpone their requeue
            imported += 1
        if imported and self.federation is not None:
            self.federation.received(self.queue_for(name), sender, imported, self.now)

    _HANDLERS = {
        M.ReplJob: _on_repljob, M.GotJob: _on_gotjob, M.Enqueue: _on_enqueue,
        M.WillQueue: _on_willqueue, M.Queued: _on_queued, M.Working: _on_working,
        M.SetAck: _on_setack, M.GotAck: _on_gotack, M.DelJob: _on_deljob, M.Pause: _on_pause,
        M.NeedJobs: _on_needjobs, M.YourJobs: _on_yourjobs,
    }


class Replication:
    """An ADDJOB waiting for its copies (the original's blocked client
    plus the 50 ms replication timer)."""

    __slots__ = ("job", "needed", "confirmed", "handle", "also", "ok", "fail", "deadline", "last_step",
                 "async_", "done")

    def __init__(self, job, needed, now):
        self.job = job
        self.needed = needed
        self.confirmed = set()  # nodes that answered GOTJOB
        self.handle = None
        self.also = None  # more clients waiting: ADDJOBs repeating this one's DEDUP key
        self.ok = self.fail = None
        self.deadline = 0
        self.last_step = now
        self.async_ = False
        self.done = False

    def reply(self, outbox, payload) -> None:
        """The outcome to every client waiting for it."""
        if self.handle is not None:
            outbox.append(Reply(self.handle, payload))
        for handle in self.also or ():
            outbox.append(Reply(handle, payload))
