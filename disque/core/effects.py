"""Effects: what the pure core asks its adapters to do.

The core never writes to a socket or a file.  Entry points append effect
records to ``NodeState.outbox``; the adapter that called the entry point
drains the outbox and executes them (see ``disque.node.service``).  Records are
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


class SendLink(NamedTuple):
    """Send a bus message on the connection ``link`` a message came from
    (PONG answers PING/MEET there: that is how a handshake learns who is
    at the other end)."""

    link: Any
    message: Any


class Link(NamedTuple):
    """Keep a (reconnecting) bus link to ``node_id`` at ``host``:``port``
    (the client port; the bus is on port + 10000).  Once connected the
    adapter calls ``NodeState.link_up(node_id)``."""

    node_id: bytes
    host: bytes
    port: int


class Unlink(NamedTuple):
    """Close and forget the link to ``node_id``."""

    node_id: bytes


class Rekey(NamedTuple):
    """The link registered under ``old`` (a handshake's temporary ID) now
    belongs to ``new``, the ID the peer told us."""

    old: bytes
    new: bytes


class Notice(NamedTuple):
    """Something an operator should read in the log (a peer flagged as
    failing, or back, a node that joins or is forgotten): one line, at info
    level.  What a stranger can repeat at will (a MEET, a message from a
    node that is not a member) carries a ``key``: the runtime logs the
    notices of one key at most once a minute, saying how many it folded
    (disque.io.log_limit); None: every one is logged."""

    text: str
    key: Any = None


# One dispatch for every executor of effects (the node runtime, the
# in-memory SimCluster): an executor has one ``on_<kind>(effect)`` method per
# effect type.
_HANDLER = {Reply: "on_reply", Persist: "on_persist", Send: "on_send", SendLink: "on_send_link",
            Link: "on_link", Unlink: "on_unlink", Rekey: "on_rekey", Notice: "on_notice"}


def execute(effects, executor) -> None:
    """Hand every effect, in order, to ``executor.on_<kind>(effect)``."""
    for effect in effects:
        getattr(executor, _HANDLER[type(effect)])(effect)
