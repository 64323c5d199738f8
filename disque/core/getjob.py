"""GETJOB: taking jobs out of queues, and the clients blocked waiting.

A GETJOB that finds nothing and may wait parks its client here
(:class:`Blocked`); the client is served, first come first served and one
job each, as soon as one of its queues gets a job
(``handleClientsBlockedOnQueues`` in the original), or gets its timeout
payload when its deadline passes.  Deadlines are timers in the node's
``timers`` schedule.

Invariants:

* a client is blocked at most once (``_blocked``), and its record is in
  the ``waiting`` list of each of its queues until it is served, times out
  or goes away; a queue with waiting clients is never reclaimed;
* a job is handed to a blocked client only from a queue that is not paused
  out, and only the first client in a queue's ``waiting`` list gets it;
* a limited queue (QLIMIT, :mod:`disque.core.qlimits`) hands out only what
  its limit allows, and a new GETJOB does not pass the clients already
  waiting on it.  An unlimited queue pays one test of an empty dict.
"""

from .effects import Reply
from .queue import PAUSED_OUT


class Blocked:
    """A client parked in GETJOB.

    ``serve(jobs)`` and ``timeout_payload`` come from the command layer: the
    core hands them back inside ``Reply`` effects without looking inside.
    ``awake`` is its slot in the node's timer schedule (0: no timeout).
    """

    __slots__ = ("client", "queues", "deadline", "serve", "timeout_payload", "awake", "since")

    def __init__(self, client, queues, deadline, serve, timeout_payload, since=0):
        self.client = client
        self.since = since  # when it blocked (the GETJOB wait histogram)
        self.queues = queues
        self.deadline = deadline
        self.serve = serve
        self.timeout_payload = timeout_payload
        self.awake = 0


class GetJob:
    def __init__(self, node):
        self.node = node
        self._queues = node.queues
        self._timers = node.timers
        self._blocked = {}  # client -> Blocked
        self._wait = node.latency.getjob_wait
        self._qlimits = node.qlimits
        self._limited = node.qlimits.by_name  # empty unless some queue is limited

    def get_jobs(self, names, count: int, client=None) -> list:
        """Pop up to ``count`` jobs scanning ``names`` left to right, again
        and again while progress is made (queue.c getjobCommand).  An empty
        queue asks federation for jobs.  ``client``: who asks (a queue
        limit counts the clients it holds back)."""
        out = []
        queues = self._queues
        get = queues.get
        federation = self.node.federation
        federating = federation.policy is not None
        limited = self._limited
        held = None
        while True:
            before = len(out)
            for name in names:
                q = get(name)
                if q is None or not q.jobs or q.flags & PAUSED_OUT:
                    if federating:
                        federation.need_jobs(name, "waiting")
                    continue
                if limited and name in limited:
                    if held is not None and name in held:
                        continue
                    lim = limited[name]
                    if q.waiting:  # clients already wait for what the limit holds: they go first
                        job = None
                        self._qlimits.hold(lim, True, client)
                    else:
                        job = self._qlimits.fetch(lim, q, True, client)
                    if job is None:  # held once per GETJOB: not asked again on the next pass
                        held = {name} if held is None else held | {name}
                        continue
                    out.append(job)
                else:
                    out.append(queues.fetch(q))
                if not q.jobs and federating:
                    federation.need_jobs(name, "zero")
                if len(out) == count:
                    self._served_at_once()
                    return out
            if len(out) == before:
                if out:
                    self._served_at_once()
                return out

    def _served_at_once(self) -> None:
        """A GETJOB served without waiting: 0 in the wait histogram (its
        first bucket, inlined: this is GETJOB's hot path)."""
        wait = self._wait
        wait.counts[0] += 1
        wait.count += 1

    # -- Blocked clients ------------------------------------------------------

    def block(self, client, names, timeout_ms: int, serve, timeout_payload) -> None:
        """Park ``client`` on the queues ``names`` until a job comes
        (``Reply`` with ``serve([job])``) or ``timeout_ms`` passes
        (``Reply`` with ``timeout_payload``; 0 = wait for ever)."""
        node = self.node
        deadline = node.now + timeout_ms if timeout_ms else 0
        b = Blocked(client, [], deadline, serve, timeout_payload, node.now)
        queues = self._queues
        for name in names:
            q = queues.queue_for(name)
            if q in b.queues:
                continue
            b.queues.append(q)
            if q.waiting is None:
                q.waiting = []
            q.waiting.append(b)
            queues.in_use(q)
        self._blocked[client] = b
        if deadline:
            self._timers.insert(b, deadline)

    def unblock(self, client) -> bool:
        """Forget a parked client (disconnect, CLIENT KILL); True if it was."""
        b = self._blocked.pop(client, None)
        if b is None:
            return False
        self._detach(b)
        return True

    def _detach(self, b: Blocked) -> None:
        if b.awake:
            self._timers.remove(b)
        queues = self._queues
        for q in b.queues:
            q.waiting.remove(b)
            if not q.waiting:
                q.waiting = None
                if not q.jobs:
                    queues.maybe_idle(q)

    def _release(self, b: Blocked, payload) -> None:
        """``b`` is served or timed out: its wait is observed."""
        del self._blocked[b.client]
        self._wait.observe(self.node.now - b.since)
        self._detach(b)
        self.node.outbox.append(Reply(b.client, payload))

    def is_blocked(self, client) -> bool:
        return client in self._blocked

    def __len__(self):
        return len(self._blocked)

    def clients(self):
        return list(self._blocked.values())

    def serve_ready(self) -> None:
        """Hand queued jobs to clients blocked on them, first come first
        served, one job per client (handleClientsBlockedOnQueues)."""
        queues = self._queues
        ready = queues.ready
        federation = self.node.federation
        limited = self._limited
        while ready:
            q = ready.pop()
            lim = limited.get(q.name) if limited else None
            while q.waiting and q.jobs and not q.flags & PAUSED_OUT:
                b = q.waiting[0]
                if lim is None:
                    job = queues.fetch(q)
                else:
                    job = self._qlimits.fetch(lim, q)
                    if job is None:
                        break
                if not q.jobs and federation.policy is not None:
                    federation.need_jobs(q.name, "zero-blocked")
                self._release(b, b.serve([job]))

    def time_out(self, b: Blocked) -> None:
        """The timer of ``b`` fired (the schedule already unscheduled it)."""
        self._release(b, b.timeout_payload)

    def unblock_all_with(self, payload) -> None:
        """Release every blocked GETJOB with ``payload`` (node leaving)."""
        for b in list(self._blocked.values()):
            self._release(b, payload)

    def rewait_on_fresh_queues(self) -> None:
        """After every queue was dropped (DEBUG FLUSHALL): blocked clients
        keep waiting, on new empty queues of the same names."""
        queues = self._queues
        for b in self._blocked.values():
            for i, q in enumerate(b.queues):
                fresh = queues.queue_for(q.name)
                if fresh.waiting is None:
                    fresh.waiting = []
                fresh.waiting.append(b)
                b.queues[i] = fresh
