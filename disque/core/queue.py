"""A named queue: the jobs of one name queued on this node.

Jobs are ordered by creation time (``ctime``, ms * 1e6 + counter), so a
re-queued job, usually older, goes back near the head, and delivery takes
the oldest first; in a queue that holds jobs with a PRIORITY (an extension,
docs/extensions.md), by priority first, highest first.  Queues exist while they hold jobs, have blocked clients,
or are paused; otherwise the node reclaims them once idle
(``QUEUE_MAX_IDLE``, see :mod:`disque.core.queues`).

Invariant: every job in ``jobs`` is QUEUED and has this queue's name; the
node changes job states, the queue only keeps the order and its counters.
"""

from bisect import bisect_left, bisect_right
from itertools import chain, islice
from operator import attrgetter

from .job import PRIORITY_DEFAULT

PAUSED_IN = 1
PAUSED_OUT = 2
PAUSED_ALL = 3

PAUSE_NAMES = {0: b"none", PAUSED_IN: b"in", PAUSED_OUT: b"out", PAUSED_ALL: b"all"}

QUEUE_MAX_IDLE = 300  # seconds

_ctime = attrgetter("ctime")

try:
    bisect_left([0], 0, key=int)
except TypeError:  # Python 3.9: bisect has no key argument
    def _first_at(sub, ctime):
        """Index of the first job of ``sub`` created at or after ``ctime``."""
        lo, hi = 0, len(sub)
        while lo < hi:
            mid = (lo + hi) // 2
            if sub[mid].ctime < ctime:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _first_after(sub, ctime):
        """Index of the first job of ``sub`` created after ``ctime``."""
        lo, hi = 0, len(sub)
        while lo < hi:
            mid = (lo + hi) // 2
            if ctime < sub[mid].ctime:
                hi = mid
            else:
                lo = mid + 1
        return lo
else:
    def _first_at(sub, ctime):
        """Index of the first job of ``sub`` created at or after ``ctime``."""
        return bisect_left(sub, ctime, key=_ctime)

    def _first_after(sub, ctime):
        """Index of the first job of ``sub`` created after ``ctime``."""
        return bisect_right(sub, ctime, key=_ctime)


class JobList:
    """The jobs of a queue in creation order (``ctime``, ties in arrival
    order): a list of sorted sublists of at most ``2 * LOAD`` jobs and the
    ``ctime`` of the last job of each, the layout of sortedcontainers'
    ``SortedKeyList`` without its per-job copy of the key.  A new job of
    this node is the newest: it is appended to the last sublist.

    Invariants: no sublist is empty; ``_maxes[i] == _lists[i][-1].ctime``;
    the sublists, concatenated, are sorted by ``ctime``; ``_len`` counts
    the jobs.
    """

    __slots__ = ("_lists", "_maxes", "_len")

    LOAD = 1000

    def __init__(self):
        self._lists = []
        self._maxes = []
        self._len = 0

    def __len__(self):
        return self._len

    def __iter__(self):
        return chain.from_iterable(self._lists)

    def __contains__(self, job):
        return self._find(job) is not None

    def __getitem__(self, index: int):
        """The job at ``index`` (0 and -1 are O(1))."""
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("job list index out of range")
        for sub in self._lists:
            if index < len(sub):
                return sub[index]
            index -= len(sub)

    def head(self, n: int) -> list:
        """The ``n`` oldest jobs, oldest first."""
        return list(islice(self, n))

    def tail(self, n: int) -> list:
        """The ``n`` newest jobs, newest first."""
        return list(islice(chain.from_iterable(reversed(sub) for sub in reversed(self._lists)), n))

    def add(self, job) -> None:
        """Insert ``job`` after every job created before it or at the same time."""
        ctime = job.ctime
        lists, maxes = self._lists, self._maxes
        if not maxes:
            lists.append([job])
            maxes.append(ctime)
            self._len += 1
            return
        if ctime >= maxes[-1]:
            i = len(maxes) - 1
            sub = lists[i]
            sub.append(job)
            maxes[i] = ctime
        else:
            i = bisect_right(maxes, ctime)
            sub = lists[i]
            sub.insert(_first_after(sub, ctime), job)
        self._len += 1
        if len(sub) > 2 * self.LOAD:
            half = sub[self.LOAD:]
            del sub[self.LOAD:]
            maxes[i] = sub[-1].ctime
            lists.insert(i + 1, half)
            maxes.insert(i + 1, half[-1].ctime)

    def pop(self, index: int = 0):
        """Remove and return the oldest job (``index`` 0, the only one
        supported)."""
        if index != 0 or not self._len:
            raise IndexError("pop from the head of a non-empty job list only")
        sub = self._lists[0]
        job = sub.pop(0)
        self._len -= 1
        if not sub:
            del self._lists[0]
            del self._maxes[0]
        return job

    def remove(self, job) -> None:
        """Remove ``job``; ValueError if it is not here."""
        where = self._find(job)
        if where is None:
            raise ValueError("job not in list")
        i, pos = where
        sub = self._lists[i]
        del sub[pos]
        self._len -= 1
        if not sub:
            del self._lists[i]
            del self._maxes[i]
        elif pos == len(sub):
            self._maxes[i] = sub[-1].ctime

    def clear(self) -> None:
        self._lists.clear()
        self._maxes.clear()
        self._len = 0

    def _find(self, job):
        """(sublist index, position) of ``job``, or None."""
        ctime = job.ctime
        lists, maxes = self._lists, self._maxes
        i = bisect_left(maxes, ctime)
        while i < len(maxes):
            sub = lists[i]
            for pos in range(_first_at(sub, ctime), len(sub)):
                other = sub[pos]
                if other is job:
                    return i, pos
                if other.ctime != ctime:
                    return None
            i += 1  # jobs of the same ctime may go on in the next sublist
        return None


def _priority(job) -> int:
    opts = job.extra.opts
    return PRIORITY_DEFAULT if opts is None else opts.priority


class PriorityJobs:
    """The jobs of a queue that holds jobs of more than the default
    PRIORITY (docs/extensions.md): a :class:`JobList` per priority, and the
    priorities present, highest first.  It reads like a JobList whose order
    is (priority, highest first; then creation order), so GETJOB, QPEEK,
    federation and every other reader of ``Queue.jobs`` follow priorities
    without knowing of them.

    Invariants: no level is empty; ``_order`` is ``_levels``' keys sorted
    highest first; ``_len`` is the sum of the levels' lengths.
    """

    __slots__ = ("_levels", "_order", "_len")

    def __init__(self, jobs=()):
        self._levels = {}
        self._order = []
        self._len = 0
        for job in jobs:
            self.add(job)

    def __len__(self):
        return self._len

    def __iter__(self):
        levels = self._levels
        return chain.from_iterable(levels[p] for p in self._order)

    def __contains__(self, job):
        level = self._levels.get(_priority(job))
        return level is not None and job in level

    def __getitem__(self, index: int):
        """The job at ``index`` in serving order (0 and -1 are cheap)."""
        if index == 0 and self._len:
            return self._levels[self._order[0]][0]
        if index == -1 and self._len:
            return self._levels[self._order[-1]][-1]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("job list index out of range")
        return next(islice(self, index, None))

    def head(self, n: int) -> list:
        """The ``n`` jobs served first, in serving order."""
        return list(islice(self, n))

    def tail(self, n: int) -> list:
        """The ``n`` jobs served last, the last first."""
        out = []
        for p in reversed(self._order):
            out.extend(self._levels[p].tail(n - len(out)))
            if len(out) >= n:
                break
        return out

    def add(self, job) -> None:
        p = _priority(job)
        level = self._levels.get(p)
        if level is None:
            level = self._levels[p] = JobList()
            self._order.append(p)
            self._order.sort(reverse=True)
        level.add(job)
        self._len += 1

    def pop(self, index: int = 0):
        """Remove and return the job served next (``index`` 0 only)."""
        if index != 0 or not self._len:
            raise IndexError("pop from the head of a non-empty job list only")
        p = self._order[0]
        level = self._levels[p]
        job = level.pop(0)
        if not level:
            del self._levels[p]
            del self._order[0]
        self._len -= 1
        return job

    def remove(self, job) -> None:
        """Remove ``job``; ValueError if it is not here."""
        p = _priority(job)
        level = self._levels.get(p)
        if level is None:
            raise ValueError("job not in list")
        level.remove(job)
        if not level:
            del self._levels[p]
            self._order.remove(p)
        self._len -= 1

    def clear(self) -> None:
        self._levels.clear()
        self._order.clear()
        self._len = 0


class Queue:
    __slots__ = ("name", "jobs", "ctime", "atime", "flags", "jobs_in", "jobs_out", "acked", "nacked", "waiting",
                 "fed", "job_defaults", "dead", "moved_in", "moved_out")

    def __init__(self, name: bytes, now_s: int):
        self.name = name
        # The shared JobExtra (disque.core.job) of the latest jobs added
        # here, so ADDJOB finds it without a lookup while the REPLICATE and
        # RETRY of the jobs stay the same (see Queues.job_defaults).
        self.job_defaults = None
        self.jobs = JobList()  # read-only outside this class
        self.ctime = now_s
        self.atime = now_s
        self.flags = 0
        self.jobs_in = 0
        self.jobs_out = 0
        self.acked = 0  # ACKJOB / FASTACK of its jobs received by this node
        self.nacked = 0  # NACKs of its jobs received by this node
        self.dead = 0  # its jobs this node moved to a dead-letter queue (QSTAT "dead")
        # Federation's moves (disque.core.federation): jobs a peer's YOURJOBS
        # queued here (counted in jobs_in too) and jobs this node handed to
        # peers (counted in jobs_out too).
        self.moved_in = 0
        self.moved_out = 0
        self.waiting = None  # list of blocked GETJOB records, created on demand
        self.fed = None  # federation state, owned by the federation policy

    def __len__(self):
        return len(self.jobs)

    def push(self, job, now_s: int) -> None:
        """Queue ``job`` in creation order, within its priority (counts as
        a job in).  The first job of another priority than the default
        turns the queue's JobList into a PriorityJobs."""
        opts = job.extra.opts
        if opts is not None and opts.priority != PRIORITY_DEFAULT and type(self.jobs) is JobList:
            self.jobs = PriorityJobs(self.jobs)
        self.jobs.add(job)
        self.atime = now_s
        self.jobs_in += 1

    def pop(self, now_s: int, job=None):
        """Take the next job out for delivery: the oldest of the highest
        priority, or ``job`` (counts as a job out)."""
        if job is None:
            job = self.jobs.pop(0)
        else:
            self.jobs.remove(job)
        self.atime = now_s
        self.jobs_out += 1
        return job

    def remove(self, job) -> None:
        """Take ``job`` out without delivering it (DEQUEUE, ACK, ...)."""
        self.jobs.remove(job)

    def paused_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & PAUSED_ALL]
