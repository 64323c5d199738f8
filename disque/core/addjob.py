"""ADDJOB: the job replication state machine.

A new job gets an ID and waits (WAIT_REPL) until ``repl - 1`` other nodes
confirmed a copy (REPLJOB answered by GOTJOB), one more node tried every
``REPL_RETRY_MS`` while copies are missing; then it becomes ACTIVE and is
queued (after its DELAY), and the client gets its ID.  If the client's
timeout passes first it gets NOREPL and the copies are deleted (DELJOB with
the ``void`` flag: the ADDJOB never happened).  ASYNC answers at once and
replicates in the background.  A node leaving the cluster or short of
memory keeps no copy of its own (``F_EXTREPL``): once the copies are
confirmed it asks one of them to queue the job and forgets it.

ADDJOB ... DEDUP: a key already used in the queue gets the existing job's
ID back (:mod:`disque.core.dedup`); a repeat of an ADDJOB still waiting for
its copies waits with it and gets the same outcome.

Invariants:

* a job waiting for its copies is in ``_replicating`` and in the node's
  timer schedule until it is confirmed, fails, or (ASYNC) its copies are
  all there; it is never queued anywhere before;
* a client is told the ID only once ``repl`` nodes hold the job (or the
  client asked for ASYNC).
"""

from .job import (
    ACKED, ACTIVE, DEFAULT_TTL, DEFAULT_TTL_RETRY, F_BCAST_QUEUED, F_BCAST_WILLQUEUE,
    F_EXTREPL, Job, QUEUED, WAIT_REPL, WILLQUEUE_ADVANCE, default_retry
)
from . import messages
from .effects import Persist, Reply
from .errors import CommandError
from .jobid import JobIdGenerator
from .jobs import TIME_ERR
from .queue import PAUSED_IN, PAUSED_OUT

REPL_RETRY_MS = 50  # one more node every 50 ms while copies are missing
KEPT = "kept"  # await_copies' outcome at its timeout: kept with the copies it has (truthy)
# The original's refusals of a job's options (SCHEDULE ADD checks a
# schedule's options with them before any run is made).
E_RETRY_ZERO = CommandError(b"ERR", b"With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)")
E_DELAY_TTL = CommandError(b"ERR", b"The specified DELAY is greater than TTL. Job refused since would never be delivered")


class Replication:
    """An ADDJOB waiting for its copies (the original's blocked client
    plus the 50 ms replication timer).  ``awake`` is its slot in the node's
    timer schedule: the next step or the client's deadline, the sooner."""

    __slots__ = ("job", "needed", "confirmed", "handle", "also", "ok", "fail", "deadline", "last_step",
                 "async_", "awake", "notify")

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
        self.awake = 0
        # The core's own waiter (a schedule's run, await_copies): notify(ok)
        # at the outcome; its job is kept at the timeout, never voided.
        self.notify = None

    def reply(self, outbox, payload, outcome=None) -> None:
        """The outcome to every client waiting for it (and to the core's
        own waiter: ``notify(outcome)``, by default whether ``payload`` is
        the success's)."""
        if self.notify is not None:
            self.notify(payload is self.ok if outcome is None else outcome)
        if self.handle is not None:
            outbox.append(Reply(self.handle, payload))
        for handle in self.also or ():
            outbox.append(Reply(handle, payload))


class AddJob:
    def __init__(self, node, node_id: bytes):
        self.node = node
        self.ids = JobIdGenerator(node_id, seed=node.rng.randbytes(20))
        self._my_delivered = (node_id,)  # one shared tuple for every local-only job
        self._prev_ctime = 0
        self.max_deliveries = 0  # the max-deliveries directive: MAXDELIVERIES of jobs that give none
        # (now, ttl, etime) of the last job created: the jobs of one
        # millisecond with one TTL share their etime, one int object instead
        # of one each (on CPython an int above 2**30 is an object of 32-48
        # bytes; a busy node creates dozens of jobs per millisecond).
        self._etime = (0, 0, 0)
        self._replicating = {}  # job id -> Replication
        self._jobs = node.jobs
        self._table = node.jobs.table
        self._schedule = node.schedule
        self._timers = node.timers
        self._queues = node.queues
        self._cluster = node.cluster
        self._random = node.rng.random

    def set_node_id(self, node_id: bytes) -> None:
        """CLUSTER RESET HARD: new jobs carry the new ID."""
        self.ids.set_node_id(node_id)
        self._my_delivered = (node_id,)

    def find_dedup(self, queue: bytes, key: bytes):
        """ADDJOB ... DEDUP: the job already added with ``key`` in
        ``queue`` (a Job), the ID of one gone within the window (bytes), or
        None: see :mod:`disque.core.dedup`."""
        return self._jobs.dedup.find(queue, key, self.node.now)

    # -- ADDJOB ------------------------------------------------------------------

    def new_ctime(self) -> int:
        """A creation time for a job made now (ADDJOB inlines it): ns-like,
        strictly increasing on this node, so creation order is total."""
        ctime = self.node.now * 1_000_000
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        return ctime

    def add(self, queue: bytes, body: bytes, repl: int, delay: int, retry: int,
            ttl: int, maxlen: int, async_: bool, dedup=None, opts=None, job_id=None):
        """Create a job from ADDJOB; return it, or raise CommandError.

        ``retry`` is -1 when not given.  ``dedup`` is the job's DEDUP key;
        the caller asked :meth:`find_dedup` first (a key already indexed
        stays with its job).  ``opts`` are the job's JobOptions (the
        extensions of docs/extensions.md), None for none.  ``job_id``: the
        job's ID when the caller derived it (a schedule's run,
        :mod:`disque.core.recurring`; the caller checked it is not known
        here), else a new one.  With copies to make, the caller then waits
        with :meth:`await_replication` or :meth:`await_copies` (unless ``async_``).
        """
        if repl > 1 and retry == 0:
            raise E_RETRY_ZERO
        if delay >= ttl:
            raise E_DELAY_TTL
        if retry == -1:
            retry = DEFAULT_TTL_RETRY if ttl == DEFAULT_TTL else default_retry(ttl)
        node = self.node
        cluster = self._cluster
        leaving = cluster.leaving
        extrepl = leaving or node.memory.level > 0
        additional = repl if extrepl else repl - 1
        reachable = cluster.room_for_copies() if additional > 0 else 0
        if additional > reachable:
            if extrepl and additional - 1 == reachable:
                reason = b"I'm leaving the cluster" if leaving else b"I'm out of memory"
                raise CommandError(b"NOREPL", b"Not enough reachable nodes for the requested replication level, since I'm unable to hold a copy of the message for the following reason: " + reason)
            raise CommandError(b"NOREPL", b"Not enough reachable nodes for the requested replication level")
        if opts is not None and additional > 0 and additional > len(cluster.active_peers(extensions=True)):
            raise CommandError(b"NOREPL", b"Not enough reachable nodes for the requested replication level "
                                          b"among the nodes that support job options (see docs/extensions.md)")
        q = self._queues.get(queue)
        if q is not None:
            if maxlen and len(q.jobs) >= maxlen:
                raise CommandError(b"MAXLEN", b"Queue is already longer than the specified MAXLEN count")
            if q.flags & PAUSED_IN:
                raise CommandError(b"PAUSED", b"Queue paused in input, try later")
            defaults = q.job_defaults
            if defaults is None or defaults.repl != repl or defaults.retry != retry or defaults.opts != opts:
                defaults = self._queues.job_defaults(queue, repl, retry, opts)
        else:
            defaults = self._queues.job_defaults(queue, repl, retry, opts)
        queue = defaults.queue  # one bytes object per queue name
        now = node.now
        ctime = now * 1_000_000  # new_ctime(), inlined
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        etime = self._etime
        if etime[0] != now or etime[1] != ttl:
            etime = self._etime = (now, ttl, now + ttl * 1000)
        etime = etime[2]
        job = Job(job_id or self.ids.new_id(ttl, retry), queue, body, WAIT_REPL, repl, ctime, etime, delay,
                  retry, now + (delay or retry) * 1000, defaults)
        if not self._table.add(job.id, job):  # 144 random bits: only a bug gets here
            raise CommandError(b"ERR", b"Internal error creating the job, check server logs")
        if dedup is not None:
            job.dedup = dedup
            self._jobs.dedup.add(job)
        if additional > 0:
            self._replicate(job, additional, extrepl, async_, q)
            return job
        job.delivered = self._my_delivered
        if delay:
            job.state = ACTIVE
            self._jobs.update_awake(job)
        else:
            # Queues.enqueue() + Jobs.update_awake() for a brand-new job,
            # inlined: this is the hottest path of the node (every ADDJOB on
            # a single node).  tests/unit/test_core.py checks they agree.
            job.state = QUEUED
            if retry:
                job.flags = F_BCAST_QUEUED | F_BCAST_WILLQUEUE
                qtime = job.qtime = now + retry * 1000 + int(self._random() * TIME_ERR)  # requeue_time()
                at = qtime - WILLQUEUE_ADVANCE
                if etime < at:
                    at = etime
            else:
                job.flags = F_BCAST_QUEUED
                job.qtime = 0
                at = etime
            self._schedule.insert(job, at)
            if q is None:
                q = self._queues.queue_for(queue)
            q.push(job, now // 1000)
            if q.waiting and not q.flags & PAUSED_OUT:
                self._queues.ready.append(q)
        if node.persist:
            node.outbox.append(Persist((b"LOADJOB", job)))
        return job

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
            pending.deadline = self.node.now + timeout_ms
            if pending.deadline < pending.awake:
                self._timers.set(pending, pending.deadline)

    def await_copies(self, job, timeout_ms: int, notify) -> None:
        """Wait, with no client, until the copies of ``job`` are confirmed
        (``notify(True)``) or ``timeout_ms`` passes: then the job is kept
        with the copies confirmed so far, active and queued as a job whose
        copies came (``notify(KEPT)``), never voided.  For the core's own
        jobs (a schedule's run), whose ID other nodes may make too: a void
        could delete a copy another node already counts as the job added,
        and would miss a copy on a node down at the time, whose RETRY
        would then bring back a job made again meanwhile.  A kept job's
        copies, confirmed or not, are in its ``delivered``: its ACK
        reaches them (a copy's WILLQUEUE gets SETACK).  ``notify(False)``
        only if the job went away while it waited."""
        pending = self._replicating[job.id]
        pending.notify = notify
        pending.ok = True
        pending.fail = False
        pending.deadline = self.node.now + timeout_ms
        if pending.deadline < pending.awake:
            self._timers.set(pending, pending.deadline)

    # -- Replication ----------------------------------------------------------------

    def _targets(self, exclude, count, opts=None):
        """Up to ``count`` reachable, non-leaving peers not in ``exclude``,
        shuffled (the original's replication order); for a job with options
        only the peers that read them (a node of the previous version
        would drop them, and could not honour a NACK delay)."""
        peers = self._cluster.active_peers(opts is not None)  # a new list, ours to shuffle
        if exclude:
            peers = [n for n in peers if n not in exclude]
        self.node.rng.shuffle(peers)
        return peers[:count]

    def _replicate(self, job, additional: int, extrepl: bool, async_: bool, q) -> None:
        """ADDJOB steps 1-2: the job (already in the table) waits for
        ``additional`` copies on other nodes.  With ``extrepl`` (leaving or
        low on memory) this node keeps no copy of its own."""
        node = self.node
        targets = self._targets((), additional, job.extra.opts)
        job.delivered = tuple(targets) if extrepl else (node.my_id, *targets)
        job.flags |= F_EXTREPL if extrepl else 0
        pending = Replication(job, additional, node.now)
        self._replicating[job.id] = pending
        message = messages.ReplJob(self._jobs.record(job))  # one message: encoded once for all targets
        for node_id in targets:
            self._cluster.send(node_id, message)
        self._timers.insert(pending, node.now + REPL_RETRY_MS)
        if async_:
            # ASYNC: the client gets its ID now and the job is queued at once
            # (locally, unless this node keeps no copy); copies go on in the
            # background, with no timeout but the TTL.
            pending.async_ = True
            self._activate(job, q)
        else:
            self._jobs.update_awake(job)  # TTL: a stuck replication cannot outlive it

    def _activate(self, job, q=None) -> None:
        """The job reached its replication level (or is ASYNC): active, and
        queued here or, without a local copy, on one confirmed node."""
        if job.state == WAIT_REPL:
            job.state = ACTIVE
        if job.flags & F_EXTREPL:
            return
        if job.delay == 0:
            self._queues.enqueue(job, False, q)
        else:
            self._jobs.update_awake(job)
        self._jobs.log_added(job)

    def confirmed_copies(self, job):
        """The nodes that confirmed a copy of ``job`` (SHOW's
        nodes-confirmed): while it waits for its copies, those of its
        replication (kept there, not on the job: no record of its own for
        that); else the job's own (a GC in progress), or None."""
        pending = self._replicating.get(job.id)
        if pending is not None and pending.job is job and not pending.async_:
            return pending.confirmed
        return job.confirmed

    def waiting_copies(self) -> int:
        """How many jobs wait for their copies (WAIT_REPL): each has its
        Replication record (ASYNC ones are active already)."""
        return sum(1 for pending in self._replicating.values() if pending.job.state == WAIT_REPL)

    def _done(self, pending) -> None:
        del self._replicating[pending.job.id]
        if pending.awake:
            self._timers.remove(pending)

    def step(self, pending) -> None:
        """The timer of ``pending`` fired: fail it past the client's
        deadline (or if the job went away), else one more node, and
        REPLJOB again to every node that may have a copy."""
        node = self.node
        now = node.now
        job = pending.job
        if pending.deadline and now >= pending.deadline or self._table.get(job.id) is not job:
            self._failed(pending)
            return
        if now - pending.last_step >= REPL_RETRY_MS:
            pending.last_step = now
            extra = self._targets(job.delivered, 1, job.extra.opts)
            if extra:
                job.delivered = (*job.delivered, extra[0])
            message = messages.ReplJob(self._jobs.record(job))
            me = node.my_id
            for node_id in job.delivered:
                if node_id != me and node_id not in pending.confirmed:
                    self._cluster.send(node_id, message)
        at = now + REPL_RETRY_MS
        if pending.deadline and pending.deadline < at:
            at = pending.deadline
        self._timers.insert(pending, at)

    def _failed(self, pending) -> None:
        """ms-timeout reached: NOREPL to the client, best-effort delete of
        the copies.  An ASYNC job whose copies never came stays as it is;
        a job of the core's own is kept, active with the copies it has
        (:meth:`await_copies`)."""
        self._done(pending)
        job = pending.job
        if pending.async_:
            return
        if pending.notify is not None and self._table.get(job.id) is job:
            self._activate(job)
            pending.reply(self.node.outbox, pending.ok, KEPT)  # (and to an ADDJOB that joined it by DEDUP key)
            return
        pending.reply(self.node.outbox, pending.fail)
        me = self.node.my_id
        for node_id in job.delivered:
            if node_id != me:
                self._cluster.send(node_id, messages.DelJob(job.id, void=True))
        if self._table.get(job.id) is job:
            self._jobs.unregister(job)

    # -- Bus messages ------------------------------------------------------------------

    def on_gotjob(self, sender, msg) -> None:
        self._got(sender, msg.job_id)

    def on_gotjobs(self, sender, msg) -> None:
        """GOTJOBS: a GOTJOB for each ID, in order."""
        got = self._got
        for job_id in msg.job_ids:
            got(sender, job_id)

    def _got(self, sender, job_id) -> None:
        """``sender`` holds a copy of ``job_id``: once enough do, the job
        is active and its client answered."""
        pending = self._replicating.get(job_id)
        if pending is None:
            return
        job = pending.job
        pending.confirmed.add(sender)
        if sender not in job.delivered:
            job.delivered = (*job.delivered, sender)
        if len(pending.confirmed) < pending.needed:
            return
        self._done(pending)
        self.node.latency.addjob_replication.observe(self.node.now - job.created_ms())
        if not pending.async_:
            self._activate(job)
            pending.reply(self.node.outbox, pending.ok)
        if job.flags & F_EXTREPL:
            # Not ours to keep: one of the copies queues it, we forget it.
            if job.delay == 0:
                me = self.node.my_id
                copies = [n for n in job.delivered if n != me]
                self._cluster.send(self.node.rng.choice(copies), messages.Enqueue(job.id))
            self._jobs.unregister(job)

    def on_repljob(self, sender, msg) -> None:
        self._copy(sender, msg.job)

    def on_repljobs(self, sender, msg) -> None:
        """REPLJOBS: a REPLJOB for each record, in order."""
        copy = self._copy
        for rec in msg.jobs:
            copy(sender, rec)

    def _copy(self, sender, rec) -> None:
        """A copy to keep: register it ACTIVE with its own requeue time
        (after DELAY + RETRY) and confirm with GOTJOB."""
        jobs = self._jobs
        job = jobs.get(rec.id)
        if job is not None:
            if job.state != ACKED:
                job.merge_delivered(rec.delivered)
                self._cluster.send(sender, messages.GotJob(rec.id))
            return
        node = self.node
        if node.memory.level > 0 or self._cluster.leaving:
            return  # no GOTJOB: the sender tries another node
        job = jobs.from_record(
            rec, (node.now + (rec.delay + rec.retry) * 1000 + jobs.jitter()) if rec.retry else 0)
        # A copy's first queueing is a re-queue: broadcast QUEUED, count it.
        job.flags = F_BCAST_QUEUED | (F_BCAST_WILLQUEUE if rec.retry else 0)
        jobs.register(job)
        jobs.log_added(job)
        self._cluster.send(sender, messages.GotJob(rec.id))

    def on_enqueue(self, sender, msg) -> None:
        job = self._jobs.get(msg.job_id)
        if job is None or job.state != ACTIVE:
            return
        self._queues.enqueue_first(job)  # asked by the creator, which keeps no copy

    def handlers(self):
        return {messages.ReplJob: self.on_repljob, messages.ReplJobs: self.on_repljobs, messages.GotJob: self.on_gotjob,
                messages.GotJobs: self.on_gotjobs, messages.Enqueue: self.on_enqueue}
