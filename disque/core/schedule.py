"""The due-time index ("awakeme" in the original).

Every registered job has one time at which the node must look at it again
(delay elapsed, WILLQUEUE, requeue, TTL, GC retry).  Instead of one reactor
timer per job, jobs sit in buckets of ``RESOLUTION`` ms keyed by the ceiling
of their due time; a heap holds the bucket keys.  The node drains all buckets
whose time has come on each tick and asks to be woken for the earliest
remaining one.

Invariant: a job is in at most one bucket, the one matching ``job.awake``
(``job.awake == 0`` means "not scheduled").  Removing a job scans its
bucket, which holds the jobs due in the same ``RESOLUTION`` ms window.
"""

from heapq import heappop, heappush

RESOLUTION = 10  # ms


class Schedule:
    __slots__ = ("_buckets", "_keys", "_len")

    def __init__(self):
        self._buckets = {}
        self._keys = []
        self._len = 0

    def __len__(self):
        return self._len

    def set(self, job, at: int) -> None:
        """(Re)schedule ``job`` at ``at`` ms (``at > 0``)."""
        old = job.awake
        if old == at:
            return
        if old:
            self._unlink(job, old)
        job.awake = at
        key = -(-at // RESOLUTION)
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = [job]
            heappush(self._keys, key)
        else:
            bucket.append(job)
        self._len += 1

    def remove(self, job) -> None:
        if job.awake:
            self._unlink(job, job.awake)
            job.awake = 0

    def _unlink(self, job, at):
        key = -(-at // RESOLUTION)
        bucket = self._buckets[key]
        bucket.remove(job)
        self._len -= 1
        if not bucket:
            del self._buckets[key]  # its heap key is dropped lazily

    def pop_due(self, now: int) -> list:
        """Remove and return the jobs of every bucket due at ``now``.

        Returned jobs are unscheduled (``awake == 0``): the caller processes
        each and schedules it again if it still needs attention.
        """
        keys = self._keys
        limit = now // RESOLUTION
        due = []
        while keys and keys[0] <= limit:
            bucket = self._buckets.pop(heappop(keys), None)
            if bucket:
                due.extend(bucket)
        for job in due:
            job.awake = 0
        self._len -= len(due)
        return due

    def next_time(self):
        """Earliest due time in ms (bucket granularity), or None."""
        keys = self._keys
        buckets = self._buckets
        while keys and keys[0] not in buckets:
            heappop(keys)
        return keys[0] * RESOLUTION if keys else None

    def clear(self):
        self._buckets.clear()
        self._keys.clear()
        self._len = 0
