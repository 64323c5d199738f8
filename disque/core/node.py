"""NodeState: the Disque state machine of one node.

Sections follow ``seeds/disque-readme.txt`` ("Disque state machine") and the
original's job.c / queue.c / ack.c.  Every public method expects the caller
to have set the current time with :meth:`NodeState.set_time` (the command
dispatcher and the tick do it), never reads a clock, and reports side effects
by appending to ``self.outbox`` (:mod:`disque.core.effects`).

Invariants (checked by the property tests):
* a job is in ``self.jobs`` iff it is registered; a QUEUED job is in exactly
  one queue (its own) and every job in a queue is QUEUED;
* every registered job is scheduled (``awake > 0``) at the earliest time it
  needs attention; its TTL always wins: nothing outlives ``etime``;
* an ACKED job is never queued again; a RETRY 0 job is queued at most once
  by this node unless a client explicitly asks (ENQUEUE).
"""

import random as _random
from heapq import heappop, heappush

from . import job as J
from .cluster import ClusterView
from .clustered import ClusterMixin
from .dedup import TOMBSTONE_OVERHEAD, DedupIndex
from .effects import Persist, Reply
from .jobid import JobIdGenerator, is_at_most_once, ttl_minutes
from .queue import PAUSED_IN, PAUSED_OUT, QUEUE_MAX_IDLE, Queue
from .schedule import Schedule
from .table import BucketedDict, JobTable

TIME_ERR = 500  # ms, random spread added to requeue times (desync nodes)
# Memory estimate: what a job costs besides its body (record, ID, table,
# due-time index and queue entries; calibrated against RSS growth per job,
# see docs/benchmarks.md), and what an empty queue costs.
JOB_OVERHEAD = 530
QUEUE_OVERHEAD = 900
# maxmemory tiers ("What happens when a node runs out of memory?")
MEMORY_EXTREPL = 0.75  # above: new jobs get copies on other nodes only
MEMORY_EVICT = 0.95  # above: evict what no guarantee needs
MEMORY_FULL = 1.0  # at: refuse commands that would use more
GC_RETRY_MIN = 1000  # ms
GC_RETRY_MAX = 60000  # ms
GC_RETRY_COUNT_MAX = 16


class CommandError(Exception):
    """A refusal the client sees as ``-<code> <message>``."""

    def __init__(self, code: bytes, message: bytes):
        super().__init__(code, message)
        self.code = code
        self.message = message


class Blocked:
    """A client parked in GETJOB.

    ``serve(jobs)`` and ``timeout_payload`` come from the command layer: the
    core hands them back inside ``Reply`` effects without looking inside.
    """

    __slots__ = ("client", "queues", "deadline", "serve", "timeout_payload", "done")

    def __init__(self, client, queues, deadline, serve, timeout_payload):
        self.client = client
        self.queues = queues
        self.deadline = deadline
        self.serve = serve
        self.timeout_payload = timeout_payload
        self.done = False


class NodeState(ClusterMixin):
    def __init__(self, node_id: bytes, now: int = 0, rng=None, host=b"", port=0):
        self.now = now
        self.rng = rng or _random.Random()
        self._random = self.rng.random
        self.cluster = ClusterView(node_id, host, port, self.rng)
        self.ids = JobIdGenerator(node_id, seed=self.rng.randbytes(20))
        self.jobs = JobTable(4096)
        self.queues = BucketedDict(256)
        self.schedule = Schedule()
        self.outbox = []
        self.cluster.outbox = self.outbox  # one effect stream, in order
        self._last_cron = 0
        self._replicating = {}  # job id -> Replication (ADDJOB waiting for copies)
        self._repl_timers = []  # heap of (time, seq, Replication); stale when done
        self._repl_seq = 0
        self.federation = None  # an IFederationPolicy; None: never federate
        self.persist = False  # emit Persist effects (AOF on)
        self._prev_ctime = 0
        self._my_delivered = (node_id,)
        # Queues that got jobs while clients wait on them; serve_ready() empties
        # it.  Public so that a host can skip the call when it is empty.
        self.ready = []
        self._blocked = {}  # client -> Blocked
        self._deadlines = []  # heap of (deadline, seq, Blocked); stale when done
        self._timers_added = False  # a blocked-client or replication deadline was added
        self._block_seq = 0
        self._idle_queues = {}  # name -> Queue, candidates for reclaiming
        self.memory_level = 0  # 0 ok, 1 >75%, 2 >95%, 3 full (set by the host)
        self.dedup = DedupIndex()  # ADDJOB ... DEDUP keys; the host sets .window

    # ------------------------------------------------------------------
    # Time
    # ------------------------------------------------------------------

    def set_time(self, now: int) -> None:
        self.now = now

    def _jitter(self) -> int:
        return int(self._random() * TIME_ERR)

    def requeue_time(self, job) -> int:
        """When ``job`` is queued again if nobody acknowledges it: RETRY
        from now, plus a random spread so copies on several nodes do not
        all fire at once.  (ADDJOB's fast path inlines it.)"""
        return self.now + job.retry * 1000 + int(self._random() * TIME_ERR)

    @property
    def my_id(self) -> bytes:
        return self.cluster.my_id

    # ------------------------------------------------------------------
    # Generic functions: LOOKUP-JOB, REGISTER, UNREGISTER, ENQUEUE, DEQUEUE
    # ------------------------------------------------------------------

    def lookup(self, job_id: bytes):
        return self.jobs.get(job_id)

    def table_add(self, job) -> bool:
        """Put ``job`` in the job table and its DEDUP key in the index
        (ADDJOB's fast path does both inline); False if the ID is taken."""
        if not self.jobs.add(job.id, job):
            return False
        if job.dedup is not None:
            self.dedup.add(job)
        return True

    def register(self, job) -> bool:
        if not self.table_add(job):
            return False
        self.update_awake(job)
        return True

    def unregister(self, job, void: bool = False) -> bool:
        """Forget a job.  Its DEDUP key is remembered for the window unless
        the job never was accepted (still waiting for its copies, or
        ``void``: its creator says the ADDJOB failed)."""
        if self.jobs.pop(job.id) is None:
            return False
        if job.dedup is not None:
            self.dedup.remove(job, self.now, not void and job.state != J.WAIT_REPL)
        if self.persist and J.ACTIVE <= job.state < J.ACKED:
            self.outbox.append(Persist((b"DELJOB", job.id)))
        self.schedule.remove(job)
        if job.state == J.QUEUED:
            self.dequeue(job)
        return True

    def get_queue(self, name: bytes):
        return self.queues.get(name)

    def queue_for(self, name: bytes) -> Queue:
        q = self.queues.get(name)
        if q is None:
            q = Queue(name, self.now // 1000)
            self.queues.add(name, q)
        return q

    def enqueue(self, job, nack: bool = False, q=None) -> bool:
        """ENQUEUE(job): put an active job in its queue; see queue.c.
        ``q`` is the job's queue when the caller already looked it up."""
        if job.state == J.QUEUED or job.qtime == 0:
            return False
        if job.retry == 0 and job.flags & J.F_DELIVERED:
            return False
        job.state = J.QUEUED
        if job.retry:
            job.flags |= J.F_BCAST_WILLQUEUE
            job.qtime = self.requeue_time(job)
        else:
            job.qtime = 0
        if job.flags & J.F_BCAST_QUEUED or nack:
            if nack:
                job.nacks += 1
            else:
                job.deliv += 1
            self.cluster_queued(job, nack)
        else:
            job.flags |= J.F_BCAST_QUEUED
        self.update_awake(job)
        if q is None:
            q = self.queues.get(job.queue)
            if q is None:
                q = self.queue_for(job.queue)
        q.jobs.add(job)
        q.atime = self.now // 1000
        q.jobs_in += 1
        if q.waiting and not q.flags & PAUSED_OUT:
            self.ready.append(q)
        return True

    def enqueue_first(self, job) -> bool:
        """ENQUEUE a job as its first queueing on this node, not as a
        redelivery: no QUEUED broadcast and no counter bumped, and an
        at-most-once job (qtime 0) gets its one queueing.  For jobs that
        arrive to be queued (ENQUEUE from their creator, YOURJOBS) and a
        controlled restart."""
        if job.qtime == 0:
            job.qtime = 1
        job.flags &= ~J.F_BCAST_QUEUED
        queued = self.enqueue(job)
        job.flags |= J.F_BCAST_QUEUED
        return queued

    def dequeue(self, job) -> bool:
        if job.state != J.QUEUED:
            return False
        q = self.queues.get(job.queue)
        job.state = J.ACTIVE
        if q is not None:
            q.jobs.remove(job)
            if not q.jobs:
                self._idle_queues[q.name] = q
        return True

    def fetch(self, q: Queue):
        """Pop the oldest job of ``q`` for delivery (state becomes ACTIVE)."""
        job = q.jobs.pop(0)
        job.state = J.ACTIVE
        job.flags |= J.F_DELIVERED
        q.atime = self.now // 1000
        q.jobs_out += 1
        if not q.jobs:
            self._idle_queues[q.name] = q
        return job

    # ------------------------------------------------------------------
    # Awake time (updateJobAwakeTime)
    # ------------------------------------------------------------------

    def update_awake(self, job) -> None:
        at = job.etime
        state = job.state
        if state == J.ACKED:
            gc = self._next_gc_time(job)
            if gc < at:
                at = gc
        elif (state == J.ACTIVE or state == J.QUEUED) and job.qtime:
            qtime = job.qtime
            if job.flags & J.F_BCAST_WILLQUEUE:
                qtime -= J.WILLQUEUE_ADVANCE
            if qtime < at:
                at = qtime
        self.schedule.set(job, at if at > 0 else 1)

    def _next_gc_time(self, job) -> int:
        period = GC_RETRY_MIN << job.gc_retry
        if period > GC_RETRY_MAX:
            period = GC_RETRY_MAX
        return self.now + period + self._jitter()

    def set_requeue_time(self, job, qtime: int) -> None:
        # Never violate at-most-once because of a caller's mistake.
        if job.retry == 0 or job.qtime == 0:
            return
        job.qtime = qtime
        self.update_awake(job)

    # ------------------------------------------------------------------
    # Job replication state machine: ADDJOB (single node part)
    # ------------------------------------------------------------------

    def find_dedup(self, queue: bytes, key: bytes):
        """ADDJOB ... DEDUP: the job already added with ``key`` in
        ``queue`` (a Job), the ID of one gone within the window (bytes), or
        None: see :mod:`disque.core.dedup`."""
        return self.dedup.find(queue, key, self.now)

    def add_job(self, queue: bytes, body: bytes, repl: int, delay: int, retry: int,
                ttl: int, maxlen: int, async_: bool, dedup=None):
        """Create a job from ADDJOB; return it, or raise CommandError.

        ``retry`` is -1 when not given.  Replication to other nodes is the
        cluster's business: here ``repl`` only has to be satisfiable.
        ``dedup`` is the job's DEDUP key; the caller asked
        :meth:`find_dedup` first (a key already indexed stays with its job).
        """
        if repl > 1 and retry == 0:
            raise CommandError(b"ERR", b"With RETRY set to 0 please explicitly set  REPLICATE to 1 (at-most-once delivery)")
        if delay >= ttl:
            raise CommandError(b"ERR", b"The specified DELAY is greater than TTL. Job refused since would never be delivered")
        if retry == -1:
            retry = J.DEFAULT_TTL_RETRY if ttl == J.DEFAULT_TTL else J.default_retry(ttl)
        leaving = self.cluster.leaving
        extrepl = leaving or self.memory_level > 0
        additional = repl if extrepl else repl - 1
        if additional > 0 and additional > self.cluster.reachable - self.cluster.leaving_peers:
            reachable = self.cluster.reachable - self.cluster.leaving_peers
            if extrepl and additional - 1 == reachable:
                reason = b"I'm leaving the cluster" if leaving else b"I'm out of memory"
                raise CommandError(b"NOREPL", b"Not enough reachable nodes for the requested replication level, since I'm unable to hold a copy of the message for the following reason: " + reason)
            raise CommandError(b"NOREPL", b"Not enough reachable nodes for the requested replication level")
        q = self.queues.get(queue)
        if q is not None:
            if maxlen and len(q.jobs) >= maxlen:
                raise CommandError(b"MAXLEN", b"Queue is already longer than the specified MAXLEN count")
            if q.flags & PAUSED_IN:
                raise CommandError(b"PAUSED", b"Queue paused in input, try later")
            queue = q.name  # share one bytes object per queue name
        now = self.now
        ctime = now * 1_000_000
        if ctime <= self._prev_ctime:
            ctime = self._prev_ctime + 1
        self._prev_ctime = ctime
        etime = now + ttl * 1000
        job = J.Job(self.ids.new_id(ttl, retry), queue, body, J.WAIT_REPL, repl, ctime, etime, delay,
                    retry, now + (delay or retry) * 1000)
        if not self.jobs.add(job.id, job):  # 144 random bits: only a bug gets here
            raise CommandError(b"ERR", b"Internal error creating the job, check server logs")
        if dedup is not None:
            job.dedup = dedup
            self.dedup.add(job)
        if additional > 0:
            self.replicate_new_job(job, additional, extrepl, async_, q)
            return job
        job.delivered = self._my_delivered
        if delay:
            job.state = J.ACTIVE
            self.update_awake(job)
        else:
            # enqueue() + update_awake() for a brand-new job, inlined: this is
            # the hottest path of the node (every ADDJOB on a single node).
            job.state = J.QUEUED
            if retry:
                job.flags = J.F_BCAST_QUEUED | J.F_BCAST_WILLQUEUE
                qtime = job.qtime = now + retry * 1000 + int(self._random() * TIME_ERR)  # requeue_time()
                at = qtime - J.WILLQUEUE_ADVANCE
                if etime < at:
                    at = etime
            else:
                job.flags = J.F_BCAST_QUEUED
                job.qtime = 0
                at = etime
            self.schedule.insert(job, at)
            if q is None:
                q = self.queue_for(queue)
            q.jobs.add(job)
            q.atime = now // 1000
            q.jobs_in += 1
            if q.waiting and not q.flags & PAUSED_OUT:
                self.ready.append(q)
        if self.persist:
            self.outbox.append(Persist((b"LOADJOB", job)))
        return job

    # ------------------------------------------------------------------
    # Job processing (processJob): TTL, WILLQUEUE, requeue, GC
    # ------------------------------------------------------------------

    def process_job(self, job) -> None:
        now = self.now
        if job.etime <= now:
            self.unregister(job)
            return
        state = job.state
        if (state == J.ACTIVE or state == J.QUEUED) and job.flags & J.F_BCAST_WILLQUEUE \
                and job.qtime - J.WILLQUEUE_ADVANCE <= now:
            if state != J.QUEUED:
                self.cluster_willqueue(job)
            job.flags &= ~J.F_BCAST_WILLQUEUE
        if job.state == J.ACTIVE and job.qtime and job.qtime <= now:
            q = self.queues.get(job.queue)
            if job.retry != 0 and q is not None and q.flags & PAUSED_IN:
                job.qtime = self.requeue_time(job)
            else:
                self.enqueue(job)
        if job.state == J.QUEUED and job.qtime and job.qtime <= now and job.retry:
            job.flags |= J.F_BCAST_WILLQUEUE
            job.qtime = self.requeue_time(job)
        if job.state == J.ACKED:
            self.try_gc(job)
            if job.id not in self.jobs:
                return
        self.update_awake(job)

    def tick(self) -> None:
        """Periodic and deadline-driven work at the current time."""
        for job in self.schedule.pop_due(self.now):
            if self.jobs.get(job.id) is job:
                self.process_job(job)
        if self.dedup.gone:
            self.dedup.expire(self.now)
        if self._repl_timers:
            self._replication_timers()
        self._expire_blocked()
        self._reclaim_idle_queues()
        self.cluster_cron()
        self.serve_ready()

    def deadline_may_be_sooner(self) -> bool:
        """True if something due earlier than the last :meth:`next_deadline`
        may have been added since it was asked (then ask again).  Lets the
        host skip recomputing the wake-up after most batches: a new job's
        requeue time lands far behind the earliest one."""
        return self.schedule.sooner or self._timers_added

    def next_deadline(self):
        """Earliest time (ms) at which :meth:`tick` has work, or None."""
        self.schedule.sooner = False
        self._timers_added = False
        t = self.schedule.next_time(self.now)
        heap = self._deadlines
        while heap and heap[0][2].done:
            heappop(heap)
        if heap and (t is None or heap[0][0] < t):
            t = heap[0][0]
        heap = self._repl_timers
        while heap and heap[0][2].done:
            heappop(heap)
        if heap and (t is None or heap[0][0] < t):
            t = heap[0][0]
        return t

    # ------------------------------------------------------------------
    # Acknowledged jobs garbage collection (ack.c)
    # ------------------------------------------------------------------

    def acknowledge(self, job) -> None:
        if job.state == J.ACKED:
            return
        self.dequeue(job)
        job.state = J.ACKED
        job.confirmed = None
        self.update_awake(job)
        if self.persist:
            self.outbox.append(Persist((b"DELJOB", job.id)))

    def try_gc(self, job) -> None:
        if job.state != J.ACKED:
            return
        dummy = not job.delivered
        if job.gc_retry != GC_RETRY_COUNT_MAX:
            job.gc_retry += 1
        if job.confirmed is None:
            job.confirmed = {self.my_id}
        all_reached = not dummy and len(job.delivered) <= len(job.confirmed) and \
            all(n in job.confirmed for n in job.delivered)
        if all_reached or (dummy and self.cluster.size == 1):
            self.unregister(job)
            return
        self.cluster_setack(job)

    def ack_jobs(self, ids) -> int:
        known = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is None:
                if self.cluster.size > 1 and not self.cluster.leaving and not is_at_most_once(job_id):
                    job = J.Job(job_id, None, None, J.ACKED, 0, 0,
                                self.now + ttl_minutes(job_id) * 60000, 0, 0, 0)
                    self.register(job)
            elif job.state != J.ACKED:
                self.acknowledge(job)
                known += 1
            if job is not None:
                self.try_gc(job)
        return known

    def fast_ack(self, ids) -> int:
        known = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is None:
                self.cluster_deljob_broadcast(job_id)
            else:
                self.cluster_deljob(job)
                self.unregister(job)
                known += 1
        return known

    def delete_jobs(self, ids) -> int:
        evicted = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None and self.unregister(job):
                evicted += 1
        return evicted

    # ------------------------------------------------------------------
    # ENQUEUE / DEQUEUE / NACK / WORKING commands
    # ------------------------------------------------------------------

    def enqueue_jobs(self, ids, nack: bool) -> int:
        n = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state == J.ACTIVE and self.enqueue(job, nack):
                n += 1
        return n

    def dequeue_jobs(self, ids) -> int:
        n = 0
        for job_id in ids:
            job = self.jobs.get(job_id)
            if job is not None and job.state == J.QUEUED and self.dequeue(job):
                n += 1
        return n

    def working(self, job_id: bytes) -> int:
        job = self.jobs.get(job_id)
        if job is None:
            raise CommandError(b"NOJOB", b"Job not known in the context of this node.")
        if job.state == J.ACKED:
            return job.retry  # as the original: nothing left to postpone
        created = job.created_ms()
        ttl = job.etime - created
        if ttl > 0 and self.now - created > ttl // 2:
            raise CommandError(b"TOOLATE", b"Half of job TTL already elapsed, you are no longer allowed to postpone the next delivery.")
        if job.state == J.QUEUED:
            self.dequeue(job)
        job.flags |= J.F_BCAST_WILLQUEUE
        self.set_requeue_time(job, self.requeue_time(job))
        self.cluster_working(job)
        return job.retry

    # ------------------------------------------------------------------
    # GETJOB and blocked clients
    # ------------------------------------------------------------------

    def get_jobs(self, names, count: int) -> list:
        """Pop up to ``count`` jobs scanning ``names`` left to right, again
        and again while progress is made (queue.c getjobCommand)."""
        out = []
        queues = self.queues
        while True:
            before = len(out)
            for name in names:
                q = queues.get(name)
                if q is None or not q.jobs or q.flags & PAUSED_OUT:
                    if self.federation is not None:
                        self.need_jobs(name, "waiting")
                    continue
                out.append(self.fetch(q))
                if not q.jobs and self.federation is not None:
                    self.need_jobs(name, "zero")
                if len(out) == count:
                    return out
            if len(out) == before:
                return out

    def block(self, client, names, timeout_ms: int, serve, timeout_payload) -> None:
        deadline = self.now + timeout_ms if timeout_ms else 0
        b = Blocked(client, [], deadline, serve, timeout_payload)
        for name in names:
            q = self.queue_for(name)
            if q in b.queues:
                continue
            b.queues.append(q)
            if q.waiting is None:
                q.waiting = []
            q.waiting.append(b)
            self._idle_queues.pop(name, None)
        self._blocked[client] = b
        if deadline:
            self._block_seq += 1
            heappush(self._deadlines, (deadline, self._block_seq, b))
            self._timers_added = True

    def unblock(self, client) -> bool:
        """Forget a parked client (disconnect, CLIENT KILL); True if it was."""
        b = self._blocked.pop(client, None)
        if b is None:
            return False
        self._detach(b)
        return True

    def _detach(self, b: Blocked) -> None:
        b.done = True
        for q in b.queues:
            q.waiting.remove(b)
            if not q.waiting:
                q.waiting = None
                if not q.jobs:
                    self._idle_queues[q.name] = q

    def is_blocked(self, client) -> bool:
        return client in self._blocked

    @property
    def blocked_count(self) -> int:
        return len(self._blocked)

    def serve_ready(self) -> None:
        """Hand queued jobs to clients blocked on them, first come first
        served, one job per client (handleClientsBlockedOnQueues)."""
        ready = self.ready
        while ready:
            q = ready.pop()
            while q.waiting and q.jobs and not q.flags & PAUSED_OUT:
                b = q.waiting[0]
                job = self.fetch(q)
                if not q.jobs and self.federation is not None:
                    self.need_jobs(q.name, "zero-blocked")
                del self._blocked[b.client]
                self._detach(b)
                self.outbox.append(Reply(b.client, b.serve([job])))

    def _expire_blocked(self) -> None:
        now = self.now
        heap = self._deadlines
        while heap and (heap[0][2].done or heap[0][0] <= now):
            b = heappop(heap)[2]
            if b.done:
                continue
            del self._blocked[b.client]
            self._detach(b)
            self.outbox.append(Reply(b.client, b.timeout_payload))

    def unblock_all_with(self, payload) -> None:
        """Release every blocked GETJOB with ``payload`` (node leaving)."""
        for b in list(self._blocked.values()):
            del self._blocked[b.client]
            self._detach(b)
            self.outbox.append(Reply(b.client, payload))

    # ------------------------------------------------------------------
    # Queues: pause, reclaim
    # ------------------------------------------------------------------

    def set_pause(self, name: bytes, flags: int, update: bool) -> int:
        q = self.queues.get(name)
        if q is None and update and flags:
            q = self.queue_for(name)
        if q is not None and update:
            was_out = q.flags & PAUSED_OUT
            q.flags = flags
            if was_out and not flags & PAUSED_OUT and q.waiting and q.jobs:
                self.ready.append(q)
            if not flags:
                self._idle_queues[q.name] = q
        return q.flags if q is not None else 0

    def _reclaim_idle_queues(self) -> None:
        if not self._idle_queues:
            return
        now_s = self.now // 1000
        for name, q in list(self._idle_queues.items()):
            if q.jobs or q.waiting or q.flags or self.queues.get(name) is not q:
                del self._idle_queues[name]
            elif now_s - q.atime >= QUEUE_MAX_IDLE:
                del self._idle_queues[name]
                self.queues.pop(name)

    # ------------------------------------------------------------------
    # Loading the AOF ("Disque and disk persistence")
    # ------------------------------------------------------------------

    def load_job(self, job) -> None:
        """A LOADJOB record: the latest record of a job wins."""
        old = self.jobs.get(job.id)
        if old is not None:
            self.unregister(old, void=True)
        job.awake = 0
        self.table_add(job)

    def load_delete(self, job_id: bytes) -> None:
        """A DELJOB record.  Keys of deleted jobs are not remembered across
        a restart (the file does not say why the job went)."""
        job = self.jobs.get(job_id)
        if job is not None:
            self.unregister(job, void=True)

    def finish_load(self, enqueue_queued: bool) -> int:
        """After the AOF: jobs come back active, waiting for their requeue
        time (RETRY 0 jobs never are).  A controlled restart
        (``enqueue_queued``) puts jobs that were queued back in their
        queues, RETRY 0 ones included: the file was written while no
        client could take them.  Returns how many were queued."""
        queued = 0
        for job in list(self.jobs.values()):
            was_queued = job.state == J.QUEUED
            job.state = J.ACTIVE
            job.flags = J.F_BCAST_QUEUED | (J.F_BCAST_WILLQUEUE if job.retry else 0)
            if job.retry == 0:
                job.qtime = 0
            if enqueue_queued and was_queued:
                self.enqueue_first(job)
                queued += 1
            else:
                self.update_awake(job)
        return queued

    # ------------------------------------------------------------------
    # Memory ("What happens when a node runs out of memory?")
    # ------------------------------------------------------------------

    def memory_used(self) -> int:
        """The node's estimate of the memory its data uses (INFO
        used_memory): realistic per job, cheap to compute, and it goes down
        when jobs go (RSS does not: freed memory stays with the process)."""
        return len(self.jobs) * JOB_OVERHEAD + self.jobs.body_bytes + len(self.queues) * QUEUE_OVERHEAD + \
            len(self.dedup.gone) * TOMBSTONE_OVERHEAD

    def set_memory_limit(self, maxmemory: int) -> int:
        """Update ``memory_level`` against ``maxmemory`` (0: no limit); above
        95% evict; return the level."""
        if maxmemory <= 0:
            self.memory_level = 0
            return 0
        used = self.memory_used()
        if used >= maxmemory * MEMORY_EVICT:
            self.evict(used - int(maxmemory * MEMORY_EVICT))
        return self.update_memory_level(maxmemory)

    def update_memory_level(self, maxmemory: int) -> int:
        """The tier only (O(1)): cheap enough after every batch of commands."""
        if maxmemory <= 0:
            self.memory_level = 0
            return 0
        ratio = self.memory_used() / maxmemory
        self.memory_level = 3 if ratio >= MEMORY_FULL else 2 if ratio >= MEMORY_EVICT else \
            1 if ratio >= MEMORY_EXTREPL else 0
        return self.memory_level

    def evict(self, goal: int) -> int:
        """Free about ``goal`` bytes without breaking a guarantee: DEDUP
        keys of jobs already gone, oldest first, and acked jobs (both only
        save a later duplicate), RETRY 0 jobs already delivered (they will
        never be delivered again), idle empty queues.
        Returns what was freed."""
        before = self.memory_used()
        self.dedup.forget_oldest(-(-goal // TOMBSTONE_OVERHEAD))
        for job in list(self.jobs.values()):
            if before - self.memory_used() >= goal:
                break
            if job.state == J.ACKED or (job.retry == 0 and job.flags & J.F_DELIVERED and job.state != J.QUEUED):
                self.unregister(job)
        for name, q in list(self._idle_queues.items()):
            if not q.jobs and not q.waiting and not q.flags and self.queues.get(name) is q:
                del self._idle_queues[name]
                self.queues.pop(name)
        return before - self.memory_used()

    def flush_all(self) -> None:
        """DEBUG FLUSHALL: drop every job and queue (blocked clients keep
        waiting on fresh, empty queues)."""
        self.jobs.clear()
        self.schedule.clear()
        self.dedup.clear()
        waiting = [b for b in self._blocked.values()]
        self.queues.clear()
        self._idle_queues.clear()
        self.ready.clear()
        for b in waiting:
            for i, q in enumerate(b.queues):
                fresh = self.queue_for(q.name)
                if fresh.waiting is None:
                    fresh.waiting = []
                fresh.waiting.append(b)
                b.queues[i] = fresh
