"""The command table.

One table maps lower-case command names to :class:`Command` records (arity
with the Redis convention, flags as shown by COMMAND, handler), filled by
the handler modules (``jobs``, ``queues``, ``server``) when :func:`load`
imports them.  Handlers return the reply encoded with the RESP encoders
(:mod:`disque.resp.reply`, so replies are byte for byte the original's),
:data:`~disque.contract.BLOCKED` when the client is parked, or a
:class:`~disque.contract.ReplySlot` for a reply that comes later
without holding up the pipeline (:mod:`.contract`, the handler/protocol
contract).  :mod:`.dispatcher` runs them: the one dispatch every request
goes through (``NodeRuntime.run_command``), with every check in one place.
:mod:`.views` holds what SHOW and the HTTP side both present.

Imports go one way: commands use the RESP encoders and the core; the RESP
protocol imports only :mod:`.contract` of this package and runs requests
through the runtime's ``run_command``.
"""

from ..config import ConfigError


class Command:
    """A table entry.  ``flags`` are the original's, as COMMAND shows them;
    ``before_auth`` (ours, not shown) lets the command run before AUTH
    when ``requirepass`` is set."""

    __slots__ = ("name", "arity", "flags", "handler", "calls", "usec", "denyoom", "loading", "before_auth",
                 "misconf", "shown_arity")

    def __init__(self, name, arity, flags, handler, before_auth=False, shown_arity=None):
        self.name = name
        self.arity = arity
        self.shown_arity = arity if shown_arity is None else shown_arity  # COMMAND's, the original's
        self.flags = flags
        self.denyoom = b"denyoom" in flags
        self.loading = b"loading" in flags  # runs while the AOF loads (dispatch_loading)
        self.misconf = b"write" in flags or name == b"ping"  # refused while the AOF is in error
        self.before_auth = before_auth
        self.handler = handler
        self.calls = 0
        self.usec = 0


TABLE = {}

# The order in which the original lists its commands (COMMAND output).
ORDER = (
    b"working", b"bgrewriteaof", b"show", b"cluster", b"addjob", b"slowlog",
    b"debug", b"monitor", b"ackjob", b"info", b"qstat", b"dequeue", b"ping",
    b"jscan", b"time", b"latency", b"qlen", b"deljob", b"auth", b"hello",
    b"qscan", b"qpeek", b"config", b"enqueue", b"getjob", b"loadjob",
    b"shutdown", b"nack", b"fastack", b"pause", b"client", b"command",
)


def command(name: str, arity: int, flags: str, before_auth: bool = False, shown_arity=None):
    """Decorator registering a handler (see :class:`Command`); ``shown_arity``
    is the arity COMMAND shows, when the original's differs (AUTH takes a
    user name too, as in Redis 6)."""

    def register(handler):
        key = name.encode()
        TABLE[key] = Command(key, arity, tuple(f.encode() for f in flags.split()), handler, before_auth,
                             shown_arity)
        return handler

    return register


def renamed_table(renames) -> dict:
    """The command table after ``rename-command <name> <new name>``
    directives, applied in order as the original does: the command leaves
    its name, and takes the new one unless that is "" (disabled).  Raises
    ConfigError for an unknown command or a name already taken."""
    table = dict(TABLE)
    for old, new in renames:
        key = old.lower().encode("utf-8", "surrogateescape")
        cmd = table.pop(key, None)
        if cmd is None:
            raise ConfigError("rename-command %s %r: no such command %r" % (old, new, old))
        if new:
            new_key = new.lower().encode("utf-8", "surrogateescape")
            if new_key in table:
                raise ConfigError("rename-command %s %r: a command is already named %r" % (old, new, new))
            table[new_key] = cmd
    return table


def load():
    """Import the handler modules (each registers its commands in
    ``TABLE``) and return :func:`.dispatcher.dispatch`.  The service calls it when it
    builds a node; importing this package alone registers nothing."""
    from . import acl, admin, cluster, connection, diagnostics, info, jobs, qlimit, queues, schedules  # noqa: F401
    from .dispatcher import dispatch

    return dispatch
