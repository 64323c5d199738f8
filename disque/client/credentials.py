"""How a client logs in: the AUTH it sends on every connection it opens.

As Redis 6+ clients do (``redis-cli --user u --pass p``):

* a username given: ``AUTH <username> <password>``, the password ``""``
  when none is given (a user declared ``nopass`` takes any password);
* a password alone: ``AUTH <password>``, which logs in as the ``default``
  user (the node's ``requirepass``);
* neither: no AUTH (the connection is the ``default`` user's, and works
  only on a node that asks for no password).

The Twisted client, the blocking connection (so the blocking client and
the Spark connector) and the worker all log in through :func:`login`, on
every connection they open: a reconnection or a failover to another node
logs in as the first connection did.
"""

from typing import List, Optional, Tuple


def login(username: Optional[str], password: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    """``(username, password)`` as AUTH sends them: the username ``None``
    when empty, the password ``""`` when a username comes without one,
    both ``None`` when no AUTH is to be sent (no username, no or an empty
    password)."""
    if not username:
        return None, password or None
    return username, password or ""


def auth_args(username: Optional[str], password: Optional[str]) -> Optional[List[str]]:
    """The AUTH command line a connection starts with, or ``None``."""
    username, password = login(username, password)
    if password is None:
        return None
    return ["AUTH", password] if username is None else ["AUTH", username, password]
