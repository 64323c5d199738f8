"""Property tests: random command sequences against one node's state machine.

Invariants checked after every step:
* registered jobs and queues agree (QUEUED <=> in its queue, queues hold
  only registered QUEUED jobs, in creation order);
* every registered job is scheduled exactly once, never later than its TTL;
* TTL always wins: after a tick nothing registered is past its expire time;
* at-most-once (RETRY 0) jobs are delivered at most once;
* an acknowledged job is never delivered again;
* a job on its queue's shared ``JobExtra`` sees only defaults there;
* the extensions (docs/extensions.md): queues serve by priority, then
  creation; no job is delivered before the time a delayed NACK (DELAY or
  BACKOFF) set; a job with MAXDELIVERIES n is delivered at most n times,
  and never again once its dead letter exists.

The same machine runs again processing at most two due jobs a run
(``CappedNodeMachine``: the runtime's runs at once finish what a tick
left), and the due-time index alone against a model (``ScheduleMachine``).
"""

import random

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from disque.core.deadletter import dead_letter_id
from disque.core.job import ACTIVE, F_NACK_DELAYED, QUEUED, STATE_NAMES
from disque.core.options import make as make_options
from disque.core.errors import CommandError
from disque.core.node import NodeState
from disque.core.schedule import RESOLUTION, Schedule

QUEUES = [b"a", b"b", b"c"]


class NodeMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.node = NodeState(b"f" * 40, 1_000_000, rng=random.Random(1))
        self.ids = []
        self.deliveries = {}
        self.at_most_once = set()
        self.acked = set()
        self.not_before = {}  # job ID -> the end of its delayed NACK
        self.limits = {}  # job ID -> MAXDELIVERIES

    def _deliver(self, jobs):
        now = self.node.now
        for job in jobs:
            n = self.deliveries[job.id] = self.deliveries.get(job.id, 0) + 1
            assert job.id not in self.acked, "acked job delivered again"
            assert now >= self.not_before.get(job.id, 0), "delivered before its delayed NACK's time"
            assert n <= self.limits.get(job.id, n), "delivered more often than MAXDELIVERIES"
            assert dead_letter_id(job.id) not in self.node.jobs, "delivered after it became a dead letter"

    @rule(queue=st.sampled_from(QUEUES), delay=st.sampled_from([0, 0, 1, 3]),
          retry=st.sampled_from([-1, 0, 1, 2, 5]), ttl=st.sampled_from([2, 5, 30, 3600]),
          priority=st.sampled_from([None, None, 1, 5, 9]), backoff=st.sampled_from([0, 0, 200, 3000]),
          max_deliveries=st.sampled_from([0, 0, 1, 3]))
    def addjob(self, queue, delay, retry, ttl, priority, backoff, max_deliveries):
        opts = None
        if priority is not None or backoff or max_deliveries:
            opts = make_options(priority or 5, backoff, backoff * 3, max_deliveries)
        try:
            job = self.node.addjob.add(queue, b"x", 1, delay, retry, ttl, 0, False, None, opts)
        except CommandError:
            assert delay >= ttl
            return
        self.ids.append(job.id)
        if max_deliveries:
            self.limits[job.id] = max_deliveries
        if retry == 0:
            self.at_most_once.add(job.id)

    @rule(names=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3), count=st.integers(1, 4))
    def getjob(self, names, count):
        self._deliver(self.node.getjob.get_jobs(names, count))

    @rule(name=st.sampled_from(QUEUES))
    def block(self, name):
        client = object()
        self.node.getjob.block(client, [name], 500, lambda jobs: jobs, None)

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), op=st.sampled_from(["ack", "fastack", "deljob", "nack", "nack-delay", "enqueue", "dequeue",
                                               "working"]))
    def job_op(self, data, op):
        job_id = data.draw(st.sampled_from(self.ids))
        node = self.node
        if op == "ack":
            node.acks.ack_jobs([job_id])
            self.acked.add(job_id)
        elif op == "fastack":
            node.acks.fast_ack([job_id])
            self.acked.add(job_id)
        elif op == "deljob":
            node.acks.delete_jobs([job_id])
        elif op in ("nack", "nack-delay"):
            delay = data.draw(st.sampled_from([0, 1, 700, 4000])) if op == "nack-delay" else None
            job = node.jobs.get(job_id)
            opts = job.opts if job is not None else None
            if node.requeue.nack_jobs([job_id], delay):
                if delay is None and opts is not None and opts.backoff and job.nacks:
                    # BACKOFF: at least 80% of base doubled per NACK, capped
                    delay = int(min(opts.backoff_max, opts.backoff << min(job.nacks - 1, 40)) * 0.8)
                self.not_before[job_id] = node.now + (delay or 0)
                assert bool(delay) == bool(job.flags & F_NACK_DELAYED) or job.id not in node.jobs \
                    or job.state == QUEUED
        elif op == "enqueue":
            if node.requeue.enqueue_jobs([job_id]):
                self.not_before.pop(job_id, None)  # ENQUEUE ends a delay at once
        elif op == "dequeue":
            node.requeue.dequeue_jobs([job_id])
        else:
            try:
                node.requeue.working(job_id)
            except CommandError:
                pass

    @precondition(lambda self: any(j.state == ACTIVE and j.retry for j in self.node.jobs.values()))
    @rule(data=st.data(), delay=st.sampled_from([50, 700, 2000]))
    def nack_delay_and_watch(self, data, delay):
        """NACK DELAY an active job, then consume every 50 ms until past
        its time: ``_deliver`` checks no delivery comes early."""
        node = self.node
        active = sorted(j.id for j in node.jobs.values() if j.state == ACTIVE and j.retry)
        job_id = data.draw(st.sampled_from(active))
        assert node.requeue.nack_jobs([job_id], delay) == 1
        self.not_before[job_id] = end = node.now + delay
        while node.now < end + 600:
            self.advance(50)
            self.getjob(QUEUES, 10)

    @rule(ms=st.sampled_from([1, 10, 100, 350, 499, 1000, 2500, 10000]))
    def advance(self, ms):
        node = self.node
        node.set_time(node.now + ms)
        node.tick()
        self.catch_up()
        for effect in node.outbox:
            if effect.payload is not None:
                self._deliver(effect.payload)
        node.outbox.clear()
        for job in node.jobs.values():
            assert job.etime > node.now, "job outlived its TTL"

    def catch_up(self):
        """What the runtime does when a tick left due jobs (more than
        ``max_due``): run_due() at once, again, until nothing is due."""
        node = self.node
        for _ in range(len(node.jobs) + 1):
            at = node.next_deadline()
            if at is None or at > node.now:
                return
            node.run_due()
        raise AssertionError("jobs still due after as many runs as jobs")

    @invariant()
    def queues_and_jobs_agree(self):
        node = self.node
        queued = 0
        for job in node.jobs.values():
            q = node.queues.get(job.queue)
            in_queue = q is not None and job in q.jobs
            assert (job.state == QUEUED) == in_queue
            queued += job.state == QUEUED
        total = 0
        for q in node.queues.values():
            order = [(-j.priority, j.ctime) for j in q.jobs]  # priority first (docs/extensions.md)
            assert order == sorted(order)
            for job in q.jobs:
                assert node.jobs.get(job.id) is job and job.queue == q.name
            total += len(q.jobs)
        assert total == queued

    @invariant()
    def job_states_counted_without_a_scan(self):
        counts = dict.fromkeys(("wait-repl", "active", "queued", "acked"), 0)
        for job in self.node.jobs.values():
            counts[STATE_NAMES[job.state].decode()] += 1
        assert self.node.job_states() == counts

    @invariant()
    def every_job_scheduled_once_before_ttl(self):
        node = self.node
        assert len(node.schedule) == len(node.jobs)
        for job in node.jobs.values():
            assert 0 < job.awake <= job.etime

    @invariant()
    def shared_extra_keeps_its_defaults(self):
        for job in self.node.jobs.values():
            if job.extra.shared:
                key = (job.queue, job.repl, job.retry, job.opts)
                assert job.extra.at_defaults() and job.extra is self.node.queues._job_defaults.get(key)

    @invariant()
    def at_most_once_delivered_at_most_once(self):
        for job_id in self.at_most_once:
            assert self.deliveries.get(job_id, 0) <= 1


NodeMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
TestNodeMachine = NodeMachine.TestCase


class CappedNodeMachine(NodeMachine):
    """The same rules and invariants with at most two due jobs processed
    by a tick or a run_due() (``NodeState.max_due``)."""

    def __init__(self):
        super().__init__()
        node = self.node
        node.max_due = 2
        self.processed = 0
        process_job = node.requeue.process_job

        def counted(job):
            self.processed += 1
            process_job(job)
        node.requeue.process_job = counted
        node.tick = self._at_most_two(node.tick)
        node.run_due = self._at_most_two(node.run_due)

    def _at_most_two(self, run):
        def capped():
            before = self.processed
            run()
            assert self.processed - before <= 2
        return capped


CappedNodeMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=60, deadline=None)
TestCappedNodeMachine = CappedNodeMachine.TestCase


# -- the due-time index alone -------------------------------------------------------

class Item:
    __slots__ = ("awake", "n")

    def __init__(self, n):
        self.awake = 0
        self.n = n


def window(at):
    return -(-at // RESOLUTION)


class ScheduleMachine(RuleBasedStateMachine):
    """Schedule against a model (item -> due time): pop_due(now, limit)
    returns only due items, each once, at most ``limit`` of them, the
    earliest windows first, and takes everything due when under its limit;
    while anything is due, next_time() says it is (at most ``now``)."""

    def __init__(self):
        super().__init__()
        self.schedule = Schedule()
        self.now = 1_000
        self.model = {}
        self.made = 0

    def _pick(self, data):
        return data.draw(st.sampled_from(sorted(self.model, key=lambda i: i.n)))

    @rule(delta=st.integers(-40, 300))
    def insert(self, delta):
        item = Item(self.made)
        self.made += 1
        at = max(1, self.now + delta)
        self.schedule.set(item, at)
        self.model[item] = at

    @precondition(lambda self: self.model)
    @rule(data=st.data(), delta=st.integers(-40, 300))
    def reschedule(self, data, delta):
        item = self._pick(data)
        at = max(1, self.now + delta)
        self.schedule.set(item, at)
        self.model[item] = at

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def remove(self, data):
        item = self._pick(data)
        self.schedule.remove(item)
        del self.model[item]
        assert item.awake == 0

    @rule(ms=st.sampled_from([0, 1, 3, 10, 25, 100]), limit=st.sampled_from([0, 1, 2, 3, 7]))
    def pop(self, ms, limit):
        self.now += ms
        now = self.now
        due = {i for i, at in self.model.items() if at <= now}
        got = self.schedule.pop_due(now, limit)
        assert len(got) == len(set(got)) and set(got) <= due
        assert not limit or len(got) <= limit
        assert all(i.awake == 0 for i in got)
        taken = [self.model.pop(i) for i in got]
        left = due - set(got)
        if not limit or len(got) < limit:
            assert not left, "something due left under the limit"
        if left:
            assert max(map(window, taken)) <= min(window(self.model[i]) for i in left)

    @invariant()
    def agrees_with_the_model(self):
        schedule = self.schedule
        assert len(schedule) == len(self.model)
        seen = 0
        for key, bucket in schedule._buckets.items():
            assert bucket
            for item in bucket:
                assert self.model[item] == item.awake and window(item.awake) == key
            seen += len(bucket)
        assert seen == len(self.model)
        nt = schedule.next_time(self.now)
        if self.model:  # at once if something is due, else never after the earliest
            assert nt is not None and nt <= max(min(self.model.values()), self.now)


ScheduleMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
TestScheduleMachine = ScheduleMachine.TestCase
