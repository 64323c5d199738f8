"""The client's exceptions: one class per error code a node answers with.

A node refuses a command with ``-<CODE> <message>``; :func:`from_reply`
turns that line into an instance of the class registered for ``CODE``
(:class:`ResponseError` itself for a code with no class of its own, such
as ``ERR``).

A node that cannot be used at all is a :class:`ConnectionError`:
unreachable, or answering but not as the client needs
(:class:`ProtocolMismatch`, :class:`TLSError`); each names the node
(``address``) and the cause (``reason``), and :class:`NoNodeAvailable`
every node tried.  The Twisted client and the blocking client both raise
these, in the same words (:mod:`.causes`), so code written against one
catches the same errors from the other.
"""

from typing import Dict, Optional, Type


class DisqueError(Exception):
    """Base of every error the client raises."""


def node_address(host: str, port: int) -> str:
    """The ``host:port`` spelling of messages (``[v6]:port`` for IPv6)."""
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


class ResponseError(DisqueError):
    """A node refused the command: ``code`` is the error prefix (``ERR``,
    ``NOJOB``...), ``message`` the rest of the line, ``str()`` the line."""

    code = "ERR"
    address: Optional[str] = None  # the node's host:port, where the client knows it (AuthError)

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
    password``, a user that does not exist).  Raised when connecting, it
    names the node (``address``) and quotes its reply (``code`` and
    ``message`` are the reply's)."""


class NoPermission(ResponseError):
    """``-NOPERM``: the user the client logged in as may not run the
    command, or touch the queue or the job it names (the node's ACL).
    Another node would refuse it the same way: the clients raise it at
    once, never fail over on it."""


class ConnectionError(DisqueError):  # noqa: A001 (the name txredisapi and redis-py use)
    """No connection to a node could carry the call: ``address`` is the
    node's ``host:port`` (``None`` when the error is about no one node),
    ``reason`` the cause in words, ``str()`` both (:meth:`at`).

    ``lasting`` says that trying the node again would fail the same way:
    it answers, but not as the client's settings need (the subclasses).
    A refused connection, a timeout or a lost connection may not last."""

    lasting = False

    def __init__(self, message: str, address: Optional[str] = None, reason: Optional[str] = None,
                 lasting: Optional[bool] = None):
        super().__init__(message)
        self.address = address
        self.reason = message if reason is None else reason
        if lasting is not None:
            self.lasting = lasting

    @classmethod
    def at(cls, address: str, reason: str, lasting: Optional[bool] = None) -> "ConnectionError":
        """The error of the node at ``address``: ``"<address>: <reason>"``."""
        return cls("%s: %s" % (address, reason), address, reason, lasting)


class ProtocolMismatch(ConnectionError):
    """The node does not speak RESP, or is not a Disque node: it answered
    bytes that are not RESP (an HTTP server...), closed the connection
    before answering, or answered HELLO as no Disque node does."""

    lasting = True


class TLSError(ConnectionError):
    """TLS could not connect the client to the node: the client uses TLS
    and the node does not serve it (or the other way round), the node's
    certificate does not verify (another CA, another host name), or the
    node refused the client's certificate (or its lack of one)."""

    lasting = True


class NoNodeAvailable(ConnectionError):
    """No known node could be used within the client's ``failover_timeout``
    (or every one failed for a cause that lasts): ``str()`` names each node
    and its last error, ``errors`` maps each ``host:port`` to it."""

    def __init__(self, message: str, *args, **kwargs):
        super().__init__(message, *args, **kwargs)
        self.errors: Dict[str, Exception] = {}

    @classmethod
    def of(cls, failures: Dict[str, Exception]) -> "NoNodeAvailable":
        """``no node available: <address> (<reason>), ...`` for
        ``failures``, each ``host:port`` and its last error."""
        text = listed(failures)
        error = cls("no node available: %s" % text, reason=text)
        error.errors = dict(failures)
        return error


def reason_of(error) -> str:
    """The cause an error (or its words) gives, without the address."""
    return getattr(error, "reason", None) or str(error) or type(error).__name__


def listed(failures: Dict[str, Exception]) -> str:
    """``<address> (<reason>), ...``, or ``no node tried``."""
    return ", ".join("%s (%s)" % (address, reason_of(e)) for address, e in failures.items()) or "no node tried"


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
SETUP_ERRORS = (ProtocolMismatch, TLSError)  # a node that answers, but not as the client's settings need


def from_reply(line) -> ResponseError:
    """The exception for an error reply's line (``bytes`` or ``str``, without
    the leading ``-``).  ``-ERR invalid password`` is an :class:`AuthError`."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", "replace")
    code = line.partition(" ")[0]
    if code == "ERR" and line.startswith("ERR invalid password"):
        return AuthError(line)
    return _BY_CODE.get(code, ResponseError)(line)
