"""Memory: what the node's data costs and what it does when short of it.

"What happens when a node runs out of memory?" in the spec: above 75% of
``maxmemory`` new jobs get their copies on other nodes only (the node keeps
none), above 95% the node evicts what no guarantee needs, and at 100% it
refuses commands that would use more.  The estimate (``used``) is cheap and
realistic per job, and it goes down when jobs go (RSS does not: freed
memory stays with the process).
"""

from .job import ACKED, F_DELIVERED, QUEUED
from .dedup import TOMBSTONE_OVERHEAD

# What a job costs besides its body (record, ID, table, due-time index and
# queue entries; calibrated against RSS growth per job, see
# docs/benchmarks.md), and what an empty queue costs.
JOB_OVERHEAD = 530
QUEUE_OVERHEAD = 900
MEMORY_EXTREPL = 0.75  # above: new jobs get copies on other nodes only
MEMORY_EVICT = 0.95  # above: evict what no guarantee needs
MEMORY_FULL = 1.0  # at: refuse commands that would use more


class Memory:
    def __init__(self, node):
        self.node = node
        self.level = 0  # 0 ok, 1 >75%, 2 >95%, 3 full (set by the runtime)

    def used(self) -> int:
        """The node's estimate of the memory its data uses (INFO used_memory)."""
        node = self.node
        jobs = node.jobs
        return len(jobs) * JOB_OVERHEAD + jobs.table.body_bytes + len(node.queues) * QUEUE_OVERHEAD + \
            len(jobs.dedup.gone) * TOMBSTONE_OVERHEAD

    def set_limit(self, maxmemory: int) -> int:
        """Update ``level`` against ``maxmemory`` (0: no limit); above 95%
        evict; return the level."""
        if maxmemory <= 0:
            self.level = 0
            return 0
        used = self.used()
        if used >= maxmemory * MEMORY_EVICT:
            self.evict(used - int(maxmemory * MEMORY_EVICT))
        return self.update_level(maxmemory)

    def update_level(self, maxmemory: int) -> int:
        """The tier only (O(1)): cheap enough after every batch of commands."""
        if maxmemory <= 0:
            self.level = 0
            return 0
        ratio = self.used() / maxmemory
        self.level = 3 if ratio >= MEMORY_FULL else 2 if ratio >= MEMORY_EVICT else \
            1 if ratio >= MEMORY_EXTREPL else 0
        return self.level

    def evict(self, goal: int) -> int:
        """Free about ``goal`` bytes without breaking a guarantee: DEDUP
        keys of jobs already gone, oldest first, and acked jobs (both only
        save a later duplicate), RETRY 0 jobs already delivered (they will
        never be delivered again), unused queues.  Returns what was freed."""
        jobs = self.node.jobs
        before = self.used()
        jobs.dedup.forget_oldest(-(-goal // TOMBSTONE_OVERHEAD))
        for job in list(jobs.values()):
            if before - self.used() >= goal:
                break
            if job.state == ACKED or (job.retry == 0 and job.flags & F_DELIVERED and job.state != QUEUED):
                jobs.unregister(job)
        self.node.queues.drop_unused()
        return before - self.used()
