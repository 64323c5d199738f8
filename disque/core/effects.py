"""Effects: what the pure core asks its adapters to do.

The core never writes to a socket or a file.  Entry points append effect
records to ``NodeState.outbox``; the adapter that called the entry point
drains the outbox and executes them (see ``disque.service``).  Records are
small and immutable; payloads they carry are opaque to the core (for
``Reply`` they are whatever the command layer rendered for the client).
"""

from typing import Any, NamedTuple


class Reply(NamedTuple):
    """Deliver ``payload`` to a client that was parked (blocked GETJOB,
    ADDJOB waiting for replication) and resume processing its pipeline."""

    client: Any
    payload: Any


class Persist(NamedTuple):
    """Append ``record`` (an argv list, as the AOF stores it) to the log."""

    record: tuple


class Send(NamedTuple):
    """Send a cluster bus message to the node ``node_id``."""

    node_id: bytes
    message: Any
