"""Audit lines: who (user, address) did what to the node.

Commands that change the node's configuration, membership, users or life
log one line each, at info level (shown with ``loglevel notice``), in the
``disque.audit`` log namespace so operators can route them apart:
CONFIG SET (the value redacted for a secret directive), CONFIG REWRITE,
CONFIG RESETSTAT, CLUSTER MEET, FORGET and RESET, ACL changes, DEBUG (any
subcommand, refused ones too), SHUTDOWN, CLIENT KILL, BGREWRITEAOF.  A line
reads::

    default from 127.0.0.1:51044: "CONFIG" "SET" "maxmemory" "100mb"

The command's arguments are shown as MONITOR shows them (quoted, escaped:
a newline in a value cannot forge a line) after :mod:`.redact`.
"""

from ..io.logs import logger
from .shown import quoted
from .redact import redacted

log = logger("disque.audit")

_DEFAULT = b"default"


def audit(ctx, client, text: str) -> None:
    """Log ``text``, what ``client`` did, with its user and address."""
    user = getattr(client, "user", None)
    name = user.name if user is not None else _DEFAULT
    log.info("{user} from {addr}: {text}", user=name.decode(errors="replace"),
             addr=client.addr.decode(errors="replace"), text=text)


def audit_command(ctx, client, name: bytes, argv, outcome: str = "") -> None:
    """Log the command ``argv`` (whose table name is ``name``), redacted,
    followed by ``outcome`` if any (``refused: ...``)."""
    text = quoted(redacted(name, argv)).decode("ascii")
    audit(ctx, client, text + (" (%s)" % outcome if outcome else ""))
