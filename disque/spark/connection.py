"""The Spark connector's connections: the client's blocking connection
(``disque.client.connection``: one socket used by one thread, ``call``,
``pipeline``, ``stream``) raising the connector's own errors.  Error replies
come back as :class:`ServerError` values from ``pipeline`` (so the caller
can check each one) and are raised by ``call``.

:func:`discover` turns the seed addresses of the ``nodes`` option into the
cluster's node list with HELLO.  Every failure to reach or authenticate is
raised as :class:`ConnectError` (:class:`ProtocolMismatchError` for a node
that does not speak RESP, :class:`TLSError` when TLS cannot connect) /
:class:`AuthError` with one line that names the node and the problem (the
client's words, :mod:`disque.client.causes`, after ``disque: ``);
:func:`refusal` is the error for any other error
reply that fails a task (:class:`NoPermissionError` for ``-NOPERM``: the
``username`` option's user may not touch the queue or the job).
"""

from itertools import chain
from typing import List, Optional, Sequence, Tuple

from ..client import causes
from ..client import connection as _wire
from ..client import errors as _errors
from ..client.connection import CONNECT_TIMEOUT_S, address, split_address

__all__ = ["AuthError", "ConnectError", "Connection", "DisqueSparkError", "NoPermissionError",
           "ProtocolMismatchError", "ServerError", "TLSError", "address", "check_auth", "discover", "hello",
           "refusal", "split_address"]


class DisqueSparkError(Exception):
    """Base of the connector's runtime errors; ``str()`` is the whole message."""


class ServerError(DisqueSparkError, _errors.ResponseError):
    """An error reply (``-ERR ...``) from a node."""


class ConnectError(DisqueSparkError, _errors.ConnectionError):
    """A node could not be reached (or dropped the connection)."""


class ProtocolMismatchError(ConnectError, _errors.ProtocolMismatch):
    """The node does not speak RESP, or is not a Disque node."""


class TLSError(ConnectError, _errors.TLSError):
    """TLS could not connect to the node."""


class AuthError(DisqueSparkError, _errors.AuthError):
    """Wrong or missing password (or username-password pair)."""


class NoPermissionError(ServerError, _errors.NoPermission):
    """``-NOPERM``: the user of the ``username`` option may not run the
    command or touch the queue or job it names."""


class Connection(_wire.Connection):
    """The client's blocking connection, raising the connector's errors."""

    reply_error = ServerError
    connect_error = ConnectError
    protocol_error = ProtocolMismatchError
    tls_error = TLSError
    auth_error = AuthError
    prefix = "disque: "

    def stream_encoded(self, groups, window: int = 256):
        """:meth:`stream_requests` of ``groups``, lists of encoded requests
        (:mod:`.encode`), one after the other."""
        return self.stream_requests(chain.from_iterable(groups), window)


def check_auth(reply, addr: str):
    """Raise :class:`AuthError` for a ``-NOAUTH`` reply."""
    _wire.check_auth(reply, addr, AuthError, Connection.prefix)


def refusal(command: str, conn: Connection, reply: ServerError) -> DisqueSparkError:
    """The error that fails a task whose ``command`` got the error
    ``reply`` on ``conn``: one line naming the node (and the user, for
    ``-NOPERM``).  A ``-NOAUTH`` is raised here, as :class:`AuthError`."""
    check_auth(reply, conn.addr)
    if str(reply).startswith("NOPERM"):
        return NoPermissionError("disque: %s refused on node %s to user '%s': %s"
                                % (command, conn.addr, conn.username or "default", reply))
    return DisqueSparkError("disque: %s failed on node %s: %s" % (command, conn.addr, reply))


def hello(conn: Connection) -> List[Tuple[str, str, int]]:
    """[(node_id, host, port), ...] from HELLO; a node that does not know
    its own host (empty) gets the address ``conn`` is connected to."""
    reply = conn.opening_call("HELLO")
    try:
        parsed = causes.hello(reply, conn.addr, host=conn.host)
    except _errors.ProtocolMismatch as e:  # not a Disque node
        raise _wire.as_class(e, ProtocolMismatchError, Connection.prefix) from None
    return [(n.id, n.host, n.port) for n in parsed.nodes]


def discover(seeds: Sequence[Tuple[str, int]], password: Optional[str],
             username: Optional[str] = None) -> List[Tuple[str, str]]:
    """The cluster's nodes as a sorted list of ``(address, node_id)``.

    Seeds are tried in order; the first that answers HELLO gives the node
    list (a node that is not a seed is found this way).  Raises
    :class:`ConnectError` naming every seed when none is reachable, and
    :class:`AuthError` on a wrong or missing password (not retried on the
    other seeds: they share the password), :class:`NoPermissionError` when
    the user may not run HELLO."""
    errors = []
    for host, port in seeds:
        try:
            with Connection(host, port, password, timeout=CONNECT_TIMEOUT_S, username=username) as conn:
                try:
                    nodes = hello(conn)
                except ServerError as e:
                    raise refusal("HELLO", conn, e) from None
        except ConnectError as e:
            errors.append(str(e).replace("disque: ", "", 1))
            continue
        found = {address(h, p): nid for nid, h, p in nodes}
        return sorted(found.items())
    raise ConnectError("disque: no reachable node among %s (%s)"
                       % (",".join(address(h, p) for h, p in seeds), "; ".join(errors)))
