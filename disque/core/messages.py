"""Cluster bus messages, as the core sees them ("Cluster messages" in
``seeds/disque-readme.txt``).

Plain immutable records: the core builds them inside ``Send`` effects and
receives them from the bus adapter; ``disque.bus.wire`` turns them into
bytes and back.  The sender's identity (node ID, client port, flags) is not
part of the records: the adapter puts the sending node's header on every
frame and hands the receiving core a :class:`Header` next to the message.

Times inside job records are absolute milliseconds of the sender's clock,
as the original's (nodes are expected to have roughly synchronised clocks;
TTL is the only one that matters across nodes).
"""

from typing import NamedTuple

# Header flags
H_LEAVING = 1  # the sender is leaving the cluster
H_EXTENSIONS = 2  # the sender reads bus version 3: job options, NACKDELAY (docs/extensions.md)

# Gossip entry flags
G_PFAIL = 1  # the sender did not hear from that node within the timeout
G_FAIL = 2  # the sender believes the cluster agreed it failed
G_LEAVING = 4
G_HANDSHAKE = 8  # unused on the wire; reserved


class Header(NamedTuple):
    sender: bytes  # 40-char hex node ID
    host: bytes  # address the sender announces ("" = use the connection's)
    port: int  # the sender's client port (bus port = port + 10000)
    flags: int


class Gossip(NamedTuple):
    node_id: bytes
    host: bytes
    port: int
    flags: int


class JobRecord(NamedTuple):
    """A job as REPLJOB / YOURJOBS carry it."""

    id: bytes
    queue: bytes
    body: bytes
    repl: int
    ctime: int
    etime: int
    delay: int
    retry: int
    nacks: int
    deliv: int
    delivered: tuple  # node IDs that may have a copy
    dedup: bytes = b""  # the DEDUP key, b"" for none (bus version 2)
    opts: object = None  # the job's JobOptions, None for none (bus version 3)


# -- membership and failure detection ----------------------------------------

class Meet(NamedTuple):
    gossip: tuple


class Ping(NamedTuple):
    gossip: tuple


class Pong(NamedTuple):
    gossip: tuple


class Fail(NamedTuple):
    node_id: bytes


# -- replication and queueing ------------------------------------------------

class ReplJob(NamedTuple):
    job: JobRecord


class GotJob(NamedTuple):
    job_id: bytes


class Enqueue(NamedTuple):
    job_id: bytes


class WillQueue(NamedTuple):
    job_id: bytes


# Queued.counter: which counter the receivers increment
COUNT_NONE = 0  # an answer to WILLQUEUE: "I have it queued", nothing new
COUNT_DELIVERY = 1  # re-queued after RETRY: additional-deliveries + 1
COUNT_NACK = 2  # re-queued by NACK: nacks + 1


class Queued(NamedTuple):
    job_id: bytes
    counter: int


class Working(NamedTuple):
    job_id: bytes


class NackDelay(NamedTuple):
    """NACK ... DELAY (or a BACKOFF): the sender queues the job again at
    ``until`` (ms); a copy waits past that time and, with ``count``,
    counts the NACK (without: an answer to its WILLQUEUE, nothing new).
    Bus version 3 only."""

    job_id: bytes
    until: int
    count: bool


# -- ACK propagation and garbage collection ----------------------------------

class SetAck(NamedTuple):
    job_id: bytes
    may_have: int


class GotAck(NamedTuple):
    job_id: bytes
    known: bool


class DelJob(NamedTuple):
    job_id: bytes
    # The job never was accepted (its ADDJOB failed to replicate): its DEDUP
    # key must not be remembered, or a retry of that ADDJOB would add nothing.
    void: bool = False  # bus version 2


# -- federation and queue state ----------------------------------------------

class NeedJobs(NamedTuple):
    queue: bytes
    count: int


class YourJobs(NamedTuple):
    jobs: tuple  # of JobRecord


class Pause(NamedTuple):
    queue: bytes
    flags: int  # PAUSED_IN | PAUSED_OUT bits of disque.core.queue


# Wire type codes: stable, never reused (the bus protocol is versioned).
TYPES = (
    (1, Meet), (2, Ping), (3, Pong), (4, Fail),
    (10, ReplJob), (11, GotJob), (12, Enqueue), (13, WillQueue), (14, Queued), (15, Working), (16, NackDelay),
    (20, SetAck), (21, GotAck), (22, DelJob),
    (30, NeedJobs), (31, YourJobs), (32, Pause),
)
