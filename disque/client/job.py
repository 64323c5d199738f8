"""What the clients hand back: jobs, node entries of HELLO, job IDs."""

from typing import NamedTuple, Optional


class Job:
    """A job as GETJOB or QPEEK returned it.

    ``id`` and ``queue`` are ``str``; ``body`` stays ``bytes`` (a job's
    body is binary: decode it as the producer encoded it).  ``nacks`` and
    ``additional_deliveries`` are the counters of GETJOB WITHCOUNTERS
    (``None`` when not asked for).  ``node`` is the ID of the node that
    delivered the job, where the client sends its WORKING and NACK first.
    """

    __slots__ = ("queue", "id", "body", "nacks", "additional_deliveries", "node")

    def __init__(self, queue: str, id: str, body: bytes, nacks: Optional[int] = None,
                 additional_deliveries: Optional[int] = None, node: Optional[str] = None):
        self.queue = queue
        self.id = id
        self.body = body
        self.nacks = nacks
        self.additional_deliveries = additional_deliveries
        self.node = node

    @property
    def origin(self) -> str:
        """The first 8 characters of the ID of the node that created the
        job (the specification's way for a consumer to see where its jobs
        are produced)."""
        return id_prefix(self.id)

    @property
    def deliveries(self) -> Optional[int]:
        """How many times the job was delivered again (nacks + additional
        deliveries), or ``None`` without counters."""
        if self.nacks is None or self.additional_deliveries is None:
            return None
        return self.nacks + self.additional_deliveries

    def __eq__(self, other):
        return isinstance(other, Job) and (self.queue, self.id, self.body) == (other.queue, other.id, other.body)

    def __hash__(self):
        return hash(self.id)

    def __repr__(self):
        return "Job(queue=%r, id=%r, body=%r, nacks=%r, additional_deliveries=%r)" % (
            self.queue, self.id, self.body, self.nacks, self.additional_deliveries)


class NodeInfo(NamedTuple):
    """One entry of HELLO: priority 1 is a healthy node, higher is worse
    (10: possibly failing, 100: failing or leaving)."""
    id: str
    host: str
    port: int
    priority: int

    @property
    def address(self) -> str:
        return "[%s]:%d" % (self.host, self.port) if ":" in self.host else "%s:%d" % (self.host, self.port)


class Hello(NamedTuple):
    version: int
    node_id: str        # the node that answered
    nodes: tuple        # NodeInfo for every node it knows, itself included


def id_prefix(job_id: str) -> str:
    """``D-5f3a1c2e-...`` -> ``5f3a1c2e``: the creating node's ID prefix."""
    return job_id[2:10]
