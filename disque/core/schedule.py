"""The due-time index ("awakeme" in the original): the core's one timer
facility.

Every registered job has one time at which the node must look at it again
(delay elapsed, WILLQUEUE, requeue, TTL, GC retry); so do a GETJOB blocked
with a timeout and an ADDJOB waiting for its copies.  The node keeps one
schedule of each kind (``NodeState.schedule`` for jobs, ``.timers`` for
the others); anything with an ``awake`` slot can be scheduled.  Instead of
one reactor timer per item, items sit in buckets of ``RESOLUTION`` ms keyed
by the ceiling of their due time; a heap holds the bucket keys.  The node
drains the buckets whose time has come on each tick, a bounded number of
items at a time (``pop_due``'s ``limit``: the rest stay due and the next
wake-up is at once), and asks to be woken for the earliest remaining one.

Invariant: an item is in at most one bucket, the one matching its
``awake`` (``awake == 0`` means "not scheduled").  Removing an item scans
its bucket, which holds the items due in the same ``RESOLUTION`` ms window.
"""

from heapq import heappop, heappush

RESOLUTION = 10  # ms


class Schedule:
    __slots__ = ("_buckets", "_keys", "_len", "sooner", "_behind")

    def __init__(self):
        self._buckets = {}
        self._keys = []
        self._len = 0
        # True when a job went into the first bucket (or one before it) since
        # the owner last asked: the earliest due time may have moved closer.
        # The owner resets it; later buckets cannot change the next wake-up.
        self.sooner = False
        # The time of the last pop_due when its limit left items due (else
        # 0): next_time() answers it, without looking for the earliest.
        self._behind = 0

    def __len__(self):
        return self._len

    def set(self, job, at: int) -> None:
        """(Re)schedule ``job`` (or any item) at ``at`` ms (``at > 0``)."""
        old = job.awake
        if old == at:
            return
        if old:
            self._unlink(job, old)
        self.insert(job, at)

    def insert(self, job, at: int) -> None:
        """Schedule a job that is not scheduled yet (``job.awake == 0``) at
        ``at`` ms (``at > 0``); ADDJOB's fast path calls it directly."""
        job.awake = at
        key = -(-at // RESOLUTION)
        keys = self._keys
        if not keys or key <= keys[0]:
            self.sooner = True
        bucket = self._buckets.get(key)
        if bucket is None:
            self._buckets[key] = [job]
            heappush(keys, key)
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

    def pop_due(self, now: int, limit: int = 0) -> list:
        """Remove and return the jobs due at ``now`` (``awake <= now``),
        earliest window first, in the order they were scheduled within one;
        with a ``limit`` (> 0) at most that many: the others stay due (and
        :meth:`next_time` says ``now`` until the next call).

        Returned jobs are unscheduled (``awake == 0``): the caller processes
        each and schedules it again if it still needs attention.
        """
        keys = self._keys
        buckets = self._buckets
        last = -(-now // RESOLUTION)
        due = []
        self._behind = 0
        while keys and keys[0] <= last:
            key = heappop(keys)
            bucket = buckets.pop(key, None)
            if not bucket:
                continue
            rest = None
            if key == last:  # the current window: only part of it is due
                later = [j for j in bucket if j.awake > now]
                if later:
                    bucket = [j for j in bucket if j.awake <= now]
                    rest = later
            if limit and len(due) + len(bucket) > limit:
                room = limit - len(due)
                head = bucket[:room]
                del bucket[:room]  # (in place: no copy of a big bucket's tail)
                if rest:
                    bucket += rest
                bucket, rest = head, bucket
                self._behind = now
                self.sooner = True  # due at once: sooner than any wake-up asked for
            if rest:
                buckets[key] = rest
                heappush(keys, key)
                due += bucket
                break
            due += bucket
        for job in due:
            job.awake = 0
        self._len -= len(due)
        return due

    def next_time(self, now: int = 0):
        """Earliest due time in ms, or None.

        Exact when the first bucket is within one window of ``now``; for a
        later bucket, the start of its window (a lower bound: waking then
        finds nothing due and asks again, now exactly).  Keeps this call
        O(1) on the hot path instead of scanning a large bucket.  After a
        :meth:`pop_due` that left items due, the time of that call.
        """
        if self._behind:
            return self._behind
        keys = self._keys
        buckets = self._buckets
        while keys and keys[0] not in buckets:
            heappop(keys)
        if not keys:
            return None
        lower = (keys[0] - 1) * RESOLUTION + 1
        if lower > now + RESOLUTION:
            return lower
        return min(j.awake for j in buckets[keys[0]])

    def clear(self):
        self.sooner = True
        self._behind = 0
        self._buckets.clear()
        self._keys.clear()
        self._len = 0
