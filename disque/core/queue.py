"""A named queue: the jobs of one name queued on this node.

Jobs are ordered by creation time (``ctime``, ms * 1e6 + counter), so a
re-queued job, usually older, goes back near the head.  Queues exist while
they hold jobs, have blocked clients, or are paused; otherwise the node
reclaims them once idle (``QUEUE_MAX_IDLE``).
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
    __slots__ = ("name", "jobs", "ctime", "atime", "flags", "jobs_in", "jobs_out", "waiting", "fed")

    def __init__(self, name: bytes, now_s: int):
        self.name = name
        self.jobs = SortedKeyList(key=_ctime)
        self.ctime = now_s
        self.atime = now_s
        self.flags = 0
        self.jobs_in = 0
        self.jobs_out = 0
        self.waiting = None  # list of blocked GETJOB records, created on demand
        self.fed = None  # federation state, owned by the federation policy

    def __len__(self):
        return len(self.jobs)

    def paused_name(self) -> bytes:
        return PAUSE_NAMES[self.flags & PAUSED_ALL]
