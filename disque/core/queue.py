"""A named queue: the jobs of one name queued on this node.

Jobs are ordered by creation time (``ctime``, ms * 1e6 + counter), so a
re-queued job, usually older, goes back near the head, and delivery takes
the oldest first.  Queues exist while they hold jobs, have blocked clients,
or are paused; otherwise the node reclaims them once idle
(``QUEUE_MAX_IDLE``, see :mod:`disque.core.queues`).

Invariant: every job in ``jobs`` is QUEUED and has this queue's name; the
node changes job states, the queue only keeps the order and its counters.
"""

from operator import attrgetter

from sortedcontainers import SortedKeyList

PAUSED_IN = 1
PAUSED_OUT = 2
PAUSED_ALL = 3

PAUSE_NAMES = {0: b"none", PAUSED_IN: b"in", PAUSED_OUT: b"out", PAUSED_ALL: b"all"}

QUEUE_MAX_IDLE = 300  # seconds

_ctime = attrgetter("ctime")


class Queue:
    __slots__ = ("name", "jobs", "ctime", "atime", "flags", "jobs_in", "jobs_out", "waiting", "fed",
                 "job_defaults")

    def __init__(self, name: bytes, now_s: int, job_defaults=None):
        self.name = name
        # The shared JobExtra of this queue's jobs (disque.core.job), so
        # ADDJOB finds it without a lookup; ``name`` is its ``queue``.
        self.job_defaults = job_defaults
        self.jobs = SortedKeyList(key=_ctime)  # read-only outside this class
        self.ctime = now_s
        self.atime = now_s
        self.flags = 0
        self.jobs_in = 0
        self.jobs_out = 0
        self.waiting = None  # list of blocked GETJOB records, created on demand
        self.fed = None  # federation state, owned by the federation policy

    def __len__(self):
        return len(self.jobs)

    def push(self, job, now_s: int) -> None:
        """Queue ``job`` in creation order (counts as a job in)."""
        self.jobs.add(job)
        self.atime = now_s
        self.jobs_in += 1

    def pop(self, now_s: int):
        """Take the oldest job out for delivery (counts as a job out)."""
        job = self.jobs.pop(0)
        self.atime = now_s
        self.jobs_out += 1
        return job

    def remove(self, job) -> None:
        """Take ``job`` out without delivering it (DEQUEUE, ACK, ...)."""
        self.jobs.remove(job)

    def paused_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & PAUSED_ALL]
