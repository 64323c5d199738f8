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
H_COUNTS = 4  # the sender reads bus version 4: COUNTSASK, COUNTS (the dashboard's cluster view)
H_BATCHES = 8  # the sender reads bus version 5: REPLJOBS and GOTJOBS (many in one message)
H_SETTINGS = 16  # the sender reads bus version 6: SETTINGS, SETTINGSSUM (the catalog), QDEMAND (queue limits)

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


class ReplJobs(NamedTuple):
    """Several REPLJOBs to one node in one message: what the bus adapter
    sends for the REPLJOBs of one reactor turn to a peer that reads bus
    version 5 (``H_BATCHES``); the core never makes one, and takes it as a
    REPLJOB for each record, in order."""

    jobs: tuple  # of JobRecord


class GotJobs(NamedTuple):
    """Several GOTJOBs to one node in one message: what the bus adapter
    sends for the GOTJOBs of one batch to a peer that reads bus version 5
    (``H_BATCHES``); the core never makes one, and takes it as a GOTJOB
    for each ID, in order."""

    job_ids: tuple  # of bytes


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


# -- the cluster view (docs/observability.md): a node's counts, for a peer --------

class CountsAsk(NamedTuple):
    """What a peer's dashboard asks of this node: its node-wide job counts
    and the counters of its ``limit`` longest queues whose name holds
    ``wanted`` (all with b""), among those the asking user may touch (all
    with ``all_queues``, else those matching one of the glob ``patterns``).
    ``token`` comes back in the answer.  Bus version 4 only."""

    token: int
    limit: int
    wanted: bytes
    all_queues: bool
    patterns: tuple  # of bytes


class QueueCount(NamedTuple):
    """One queue's counters in a COUNTS answer (QSTAT's and the API's)."""

    name: bytes
    len: int
    added: int  # jobs-in
    removed: int  # jobs-out
    acked: int
    nacked: int
    moved_in: int
    moved_out: int
    paused: int  # PAUSED_IN | PAUSED_OUT bits of disque.core.queue


class Counts(NamedTuple):
    """The answer to COUNTSASK ``token``: the node's jobs (registered,
    queued), how many queues the asking user may touch there (``total``)
    and how many of those matched (``matching``), the counters of the
    longest matching ones, and where the node's HTTP side listens
    (``http_port`` 0: it has none).  Bus version 4 only."""

    token: int
    jobs: int
    queued: int
    total: int
    matching: int
    queues: tuple  # of QueueCount, longest first
    http_port: int
    http_tls: bool
    http_bind: bytes


# -- the catalog (disque.core.settings): schedules and queue limits -------------

class Settings(NamedTuple):
    """Catalog entries (disque.core.catalog.Entry) the receiver merges,
    sent as ``mode`` says: SETTINGS_PUSH, a change made or learned by the
    sender; SETTINGS_ASK, the sender's whole catalog (a link that came up,
    an answer to SETTINGSSUM), asking for what the receiver holds newer or
    the sender lacks; SETTINGS_ANSWER, that answer (sent even when empty:
    it tells the asker the exchange is complete).  Bus version 6 only."""

    entries: tuple  # of disque.core.catalog.Entry
    mode: int


SETTINGS_PUSH = 0
SETTINGS_ASK = 1
SETTINGS_ANSWER = 2


class SettingsSum(NamedTuple):
    """The digest of the sender's catalog (``Catalog.digest``): a receiver
    whose catalog differs answers with its whole catalog.  Bus version 6
    only."""

    digest: bytes


class QueueDemand(NamedTuple):
    """One limited queue in a QDEMAND: the sender's demand (its consumers,
    disque.core.qlimits) and the queue's jobs it has in flight."""

    queue: bytes
    demand: int
    inflight: int


class QDemand(NamedTuple):
    """The sender's demand for each queue it holds a limit for, a few
    times a second (the cluster split, disque.core.budget).  Bus version 6
    only."""

    queues: tuple  # of QueueDemand


# Wire type codes: stable, never reused (the bus protocol is versioned).
TYPES = (
    (1, Meet), (2, Ping), (3, Pong), (4, Fail),
    (10, ReplJob), (11, GotJob), (12, Enqueue), (13, WillQueue), (14, Queued), (15, Working), (16, NackDelay),
    (17, GotJobs), (18, ReplJobs),
    (20, SetAck), (21, GotAck), (22, DelJob),
    (30, NeedJobs), (31, YourJobs), (32, Pause),
    (40, CountsAsk), (41, Counts),
    (50, Settings), (51, SettingsSum), (55, QDemand),
)
