"""NodeState: the Disque state machine of one node, assembled from its parts.

Each part is a small module named for the spec section it implements, and
owns the state of that section:

============  ==========================  ==================================
attribute     module                      what it holds and does
============  ==========================  ==================================
``jobs``      :mod:`~disque.core.jobs`    job table, DEDUP keys, REGISTER /
                                          UNREGISTER, awake and requeue times
``queues``    :mod:`~disque.core.queues`  queues by name, ENQUEUE / DEQUEUE,
                                          pause, idle queue reclaiming
``addjob``    :mod:`~disque.core.addjob`  ADDJOB and the job replication
                                          state machine
``getjob``    :mod:`~disque.core.getjob`  GETJOB and blocked clients
``requeue``   :mod:`~disque.core.requeue` re-queueing (WILLQUEUE, QUEUED,
                                          NACK, WORKING), job processing
``acks``      :mod:`~disque.core.acks`    ACKJOB, FASTACK, acked jobs GC
``federation``:mod:`~disque.core.federation` NEEDJOBS / YOURJOBS
``memory``    :mod:`~disque.core.memory`  memory estimate, tiers, eviction
``latency``   :mod:`~disque.core.latency` GETJOB wait, replication and
                                          ADDJOB-to-ACK histograms
``cluster``   :mod:`~disque.core.membership` membership, gossip, failures
``settings``  :mod:`~disque.core.settings`  the catalog every node keeps
                                          alike: schedules, queue limits
``recurring`` :mod:`~disque.core.recurring` schedules: their runs fired
                                          once, whichever nodes are up
``qlimits``   :mod:`~disque.core.qlimits`  queue rate and concurrency
                                          limits (QLIMIT), their split
``schedule``  :mod:`~disque.core.schedule`  due-time index of jobs
``timers``    :mod:`~disque.core.schedule`  the same, for blocked GETJOBs
                                          and ADDJOBs waiting for copies
============  ==========================  ==================================

Parts call each other through the node (``node.queues.enqueue(job)``).
This module keeps what spans them all: the clock, the periodic tick, the
dispatch of bus messages, and resets.

Every entry point expects the caller to have set the current time with
:meth:`NodeState.set_time` (the command dispatcher and the tick do it),
never reads a clock, and reports side effects by appending to
``self.outbox`` (:mod:`disque.core.effects`).

Invariants (checked by the property tests):
* a job is in ``jobs`` iff it is registered; a QUEUED job is in exactly
  one queue (its own) and every job in a queue is QUEUED;
* every registered job is scheduled (``awake > 0``) at the earliest time it
  needs attention; its TTL always wins: nothing outlives ``etime`` once
  what is due is done (``max_due`` jobs a run: a backlog takes a few);
* an ACKED job is never queued again; a RETRY 0 job is queued at most once
  by this node unless a client explicitly asks (ENQUEUE).
"""

import random as _random

from . import messages
from .acks import Acks
from .addjob import AddJob, Replication
from .cluster_node import new_node_id
from .federation import Federation
from .getjob import Blocked, GetJob
from .jobs import Jobs
from .latency import Latency
from .membership import ClusterView
from .memory import Memory
from .qlimits import KIND as LIMIT_KIND, QueueLimits, Refill
from .queues import Queues
from .requeue import Requeue
from .schedule import Schedule
from .deadletter import DeadLetters
from .settings import Settings
from .recurring import Recurring

CRON_PERIOD_MS = 100  # membership and federation housekeeping
# Jobs processed by one run_due() or tick() (the original's processJobs
# takes 10,000 a call, in C): about 10 ms of work here.  More due at once (a
# restart from a big AOF, a mass of jobs sharing a requeue time or a TTL)
# stay due, and the next deadline is now: the runtime comes back on the next
# reactor turn, after what clients and peers sent meanwhile.
MAX_DUE_PER_RUN = 1000


class NodeState:
    def __init__(self, node_id: bytes, now: int = 0, rng=None, host=b"", port=0):
        self.now = now
        self.rng = rng or _random.Random()
        self.outbox = []
        self.persist = False  # emit Persist effects (AOF on)
        self.cluster = ClusterView(node_id, host, port, self.rng)
        self.cluster.outbox = self.outbox  # one effect stream, in order
        self.schedule = Schedule()  # jobs, by awake time
        self.timers = Schedule()  # Blocked and Replication records, by deadline
        self.max_due = MAX_DUE_PER_RUN  # jobs processed per run_due() / tick()
        self.latency = Latency()  # histograms for operators (disque.core.latency)
        # Parts, in dependency order: each may cache the ones before it.
        self.jobs = Jobs(self)
        self.queues = Queues(self)
        self.memory = Memory(self)
        self.federation = Federation(self)
        self.qlimits = QueueLimits(self)
        self.addjob = AddJob(self, node_id)
        self.getjob = GetJob(self)
        self.requeue = Requeue(self)
        self.acks = Acks(self)
        self.dead_letters = DeadLetters(self)
        self.settings = Settings(self)  # the catalog: schedules, queue limits
        self.recurring = Recurring(self)  # schedules: their runs fired once
        self.settings.on(LIMIT_KIND, self.qlimits.apply)
        # Queues that got jobs while clients wait on them: the runtime may skip
        # getjob.serve_ready() when it is empty.
        self.ready = self.queues.ready
        self._last_cron = 0
        self._bus = {}
        for part in (self.addjob, self.requeue, self.acks, self.queues, self.federation, self.settings,
                     self.qlimits):
            self._bus.update(part.handlers())
        self._timer_fired = {Blocked: self.getjob.time_out, Replication: self.addjob.step,
                             Refill: self.qlimits.refilled}

    @property
    def my_id(self) -> bytes:
        return self.cluster.my_id

    def job_states(self) -> dict:
        """Registered jobs by state, without visiting the jobs: queued ones
        are in the queues, waiting ones in the replication records, acked
        ones counted as they change; the rest are active."""
        queued = sum(len(q.jobs) for q in self.queues.values())
        waiting = self.addjob.waiting_copies()
        acked = self.jobs.acked
        return {"wait-repl": waiting, "active": len(self.jobs) - queued - waiting - acked,
                "queued": queued, "acked": acked}

    # ------------------------------------------------------------------
    # Time
    # ------------------------------------------------------------------

    def set_time(self, now: int) -> None:
        self.now = now

    def run_due(self) -> None:
        """The work whose time has come, and only that: jobs due in the
        schedule (``processJob``), timers (blocked GETJOB timeouts,
        replication steps and deadlines), then clients waiting for jobs that
        became ready.  The runtime calls it when :meth:`next_deadline`
        arrives, which can be hundreds of times a second under load, so it
        does nothing periodic.  It processes at most ``max_due`` jobs: with
        more due, :meth:`next_deadline` is now until they are done."""
        self._pop_due()
        self.getjob.serve_ready()

    def tick(self) -> None:
        """Periodic work (the runtime calls it ``hz`` times a second), after
        what is due: DEDUP keys past their window, idle queues reclaimed,
        schedules' runs, and every ``CRON_PERIOD_MS`` the cluster's,
        federation's and the catalog's cron."""
        now = self.now
        self._pop_due()
        if self.jobs.dedup.gone:
            self.jobs.dedup.expire(now)
        self.queues.reclaim_idle()
        self.recurring.cron(now)
        if now - self._last_cron >= CRON_PERIOD_MS:
            self._last_cron = now
            self.cluster.cron(now)
            self.federation.cron()
            self.settings.cron()
            self.qlimits.cron()
        self.getjob.serve_ready()

    def _pop_due(self) -> None:
        now = self.now
        jobs = self.jobs
        process_job = self.requeue.process_job
        for job in self.schedule.pop_due(now, self.max_due):
            if jobs.get(job.id) is job:
                process_job(job)
        if len(self.timers):
            fired = self._timer_fired
            for timer in self.timers.pop_due(now):
                fired[type(timer)](timer)

    def deadline_may_be_sooner(self) -> bool:
        """True if something due earlier than the last :meth:`next_deadline`
        may have been added since it was asked (then ask again).  Lets the
        runtime skip recomputing the wake-up after most batches: a new job's
        requeue time lands far behind the earliest one."""
        return self.schedule.sooner or self.timers.sooner

    def next_deadline(self):
        """Earliest time (ms) at which :meth:`tick` has work, or None."""
        self.schedule.sooner = False
        self.timers.sooner = False
        t = self.schedule.next_time(self.now)
        timer = self.timers.next_time(self.now)
        if timer is not None and (t is None or timer < t):
            t = timer
        return t

    # ------------------------------------------------------------------
    # The cluster bus
    # ------------------------------------------------------------------

    def bus_receive(self, header: messages.Header, msg, link) -> None:
        """One message from the bus.  ``link`` is the adapter's connection
        (opaque here but for ``node_id``, ``peer_host`` and ``local_host``)."""
        if not self.cluster.receive(header, msg, link, self.now):
            return
        handler = self._bus.get(type(msg))
        if handler is not None:
            handler(header.sender, msg)
            if self.ready:  # jobs came in (YOURJOBS, ENQUEUE, ...) for blocked clients
                self.getjob.serve_ready()

    def handle(self, kind, handler) -> None:
        """Hand the bus messages of type ``kind`` to ``handler(sender,
        msg)``, once membership has taken them as a member's: for the
        messages an adapter answers from what it reads of the node (the
        cluster view's COUNTSASK and COUNTS, disque.node.census), which
        change no state here."""
        self._bus[kind] = handler

    def link_up(self, node_id: bytes) -> None:
        self.cluster.link_up(node_id, self.now)

    def link_down(self, node_id: bytes) -> None:
        self.cluster.link_down(node_id)

    # ------------------------------------------------------------------
    # Resets
    # ------------------------------------------------------------------

    def flush_all(self) -> None:
        """DEBUG FLUSHALL: drop every job and queue (blocked clients keep
        waiting on fresh, empty queues)."""
        self.jobs.clear()
        self.schedule.clear()
        self.queues.clear()
        self.qlimits.forget_inflight()
        self.getjob.rewait_on_fresh_queues()

    def cluster_reset(self, hard: bool) -> None:
        """CLUSTER RESET: forget every peer; HARD also takes a new ID and
        drops every job and queue (a fresh node)."""
        if hard:
            new_id = new_node_id()
            self.flush_all()
            self.cluster.reset(new_id)
            self.addjob.set_node_id(new_id)
            self.settings.catalog.clear()
            self.recurring.clear()
        else:
            self.cluster.reset()
