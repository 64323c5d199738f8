"""The client's exceptions: one class per error code a node answers with.

A node refuses a command with ``-<CODE> <message>``; :func:`from_reply`
turns that line into an instance of the class registered for ``CODE``
(:class:`ResponseError` itself for a code with no class of its own, such
as ``ERR``).  The Twisted client and the blocking client both raise these,
so code written against one catches the same errors from the other.
"""

from typing import Dict, Type


class DisqueError(Exception):
    """Base of every error the client raises."""


class ResponseError(DisqueError):
    """A node refused the command: ``code`` is the error prefix (``ERR``,
    ``NOJOB``...), ``message`` the rest of the line, ``str()`` the line."""

    code = "ERR"

    def __init__(self, line: str):
        super().__init__(line)
        code, _, message = line.partition(" ")
        if code.isupper():
            self.code, self.message = code, message
        else:  # an error line without a code (never sent by a node)
            self.message = line


class NoJob(ResponseError):
    """``-NOJOB``: the node does not know the job (WORKING, and the
    commands that need the job's copy)."""


class NoReplication(ResponseError):
    """``-NOREPL``: ADDJOB could not reach the requested number of copies
    (not enough reachable nodes, or its timeout passed first).  With a
    timeout the job may still exist on some nodes: the specification leaves
    it to the client to retry or not."""


class Paused(ResponseError):
    """``-PAUSED``: the queue is paused for input (ADDJOB refused)."""


class Leaving(ResponseError):
    """``-LEAVING``: the node is leaving the cluster.  The cluster-aware
    clients never raise it from a call they can move: they connect to
    another node and run the call there."""


class TooLate(ResponseError):
    """``-TOOLATE``: WORKING after half of the job's TTL elapsed."""


class OutOfMemory(ResponseError):
    """``-OOM``: the node is over ``maxmemory`` and refuses new jobs."""


class MaxLen(ResponseError):
    """``-MAXLEN``: ADDJOB's MAXLEN is reached for the queue."""


class BadId(ResponseError):
    """``-BADID``: a malformed job ID."""


class AuthError(ResponseError):
    """The node wants a password (``-NOAUTH``) or refused the one given
    (``-WRONGPASS`` for a username-password pair, ``-ERR invalid
    password``)."""


class NoPermission(ResponseError):
    """``-NOPERM``: the user the client logged in as may not run the
    command, or touch the queue or the job it names (the node's ACL).
    Another node would refuse it the same way: the clients raise it at
    once, never fail over on it."""


class ConnectionError(DisqueError):  # noqa: A001 (the name txredisapi and redis-py use)
    """No connection to a node could carry the call."""


class NoNodeAvailable(ConnectionError):
    """Every known node failed for longer than the client's
    ``failover_timeout``: ``str()`` names each node and its last error."""


LEAVING_REASON = "I'm leaving the cluster"


def means_leaving(error: Exception) -> bool:
    """Whether a refusal says the node is leaving the cluster: ``-LEAVING``,
    or ADDJOB's ``-NOREPL`` whose reason is that the node leaves (a node
    that cannot count itself as a copy in a small cluster).  Either way
    nothing was done, and the call can run on another node."""
    return isinstance(error, Leaving) or (
        isinstance(error, NoReplication) and error.message.endswith(LEAVING_REASON))


_BY_CODE: Dict[str, Type[ResponseError]] = {
    "NOJOB": NoJob, "NOREPL": NoReplication, "PAUSED": Paused, "LEAVING": Leaving,
    "TOOLATE": TooLate, "OOM": OutOfMemory, "MAXLEN": MaxLen, "BADID": BadId,
    "NOAUTH": AuthError, "WRONGPASS": AuthError, "NOPERM": NoPermission,
}

ACCESS_ERRORS = (AuthError, NoPermission)  # refusals no other node answers differently


def from_reply(line) -> ResponseError:
    """The exception for an error reply's line (``bytes`` or ``str``, without
    the leading ``-``).  ``-ERR invalid password`` is an :class:`AuthError`."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    code = line.partition(" ")[0]
    if code == "ERR" and line.startswith("ERR invalid password"):
        return AuthError(line)
    return _BY_CODE.get(code, ResponseError)(line)
