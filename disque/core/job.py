"""The job record and its states.

A ``Job`` is the per-job object a node keeps; it is the largest thing in
memory, so it has ``__slots__`` and no per-job containers unless needed:
``delivered`` is a tuple of node IDs (one shared tuple for the common
single-copy case) and ``confirmed`` is ``None`` outside replication / GC.

Times are integers in milliseconds of the node's clock, except ``ctime``
which follows the original: ``creation_ms * 1_000_000 + counter`` so that jobs
created in the same millisecond on one node still sort in creation order.
``qtime == 0`` means "never queue again" (at-most-once jobs once queued).
"""

WAIT_REPL = 0
ACTIVE = 1
QUEUED = 2
ACKED = 3

STATE_NAMES = (b"wait-repl", b"active", b"queued", b"acked")
STATE_BY_NAME = {name: i for i, name in enumerate(STATE_NAMES)}

# Flags.
F_BCAST_QUEUED = 1  # the next enqueue is a re-queue: broadcast QUEUED
F_BCAST_WILLQUEUE = 2  # wake up 500 ms before qtime to send WILLQUEUE
F_DELIVERED = 4  # served to a client at least once by this node
F_EXTREPL = 8  # created here without a local copy (leaving / low memory)

WILLQUEUE_ADVANCE = 500  # ms before qtime when WILLQUEUE is sent
DEFAULT_RETRY_MAX = 300  # s, cap of the default RETRY (TTL/10)
DEFAULT_TTL = 86400  # s


class Job:
    __slots__ = (
        "id",
        "queue",
        "body",
        "state",
        "flags",
        "repl",
        "ctime",
        "etime",
        "delay",
        "retry",
        "qtime",
        "awake",
        "nacks",
        "deliv",
        "delivered",
        "confirmed",
        "gc_retry",
    )

    def __init__(self, job_id, queue, body, state, repl, ctime, etime, delay, retry, qtime):
        self.id = job_id
        self.queue = queue
        self.body = body
        self.state = state
        self.flags = 0
        self.repl = repl
        self.ctime = ctime
        self.etime = etime
        self.delay = delay
        self.retry = retry
        self.qtime = qtime
        self.awake = 0
        self.nacks = 0
        self.deliv = 0
        self.delivered = ()
        self.confirmed = None
        self.gc_retry = 0

    def created_ms(self) -> int:
        return self.ctime // 1_000_000

    def __repr__(self):
        return "<Job %s %s q=%r>" % (
            self.id.decode("ascii", "replace"),
            STATE_NAMES[self.state].decode(),
            self.queue,
        )


def default_retry(ttl: int) -> int:
    """RETRY when not given: TTL/10, at most 5 minutes, at least 1 second."""
    retry = ttl // 10
    if retry > DEFAULT_RETRY_MAX:
        retry = DEFAULT_RETRY_MAX
    return retry or 1
