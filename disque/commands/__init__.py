"""The command table and dispatcher.

One table maps lower-case command names to :class:`Command` records (arity
with the Redis convention, flags as shown by COMMAND, handler), filled by
the handler modules (``jobs``, ``queues``, ``server``) when :func:`load`
imports them.  Handlers return the reply encoded with the RESP adapter's
encoders (:mod:`disque.resp.reply`, so replies are byte for byte the
original's), :data:`~disque.resp.reply.BLOCKED` when the client is parked,
or a :class:`~disque.resp.reply.ReplySlot` for a reply that comes later
without holding up the pipeline.

Imports go one way: commands use the adapter's reply vocabulary and the
core; the RESP protocol never imports this package, it calls the
``dispatch`` the service hands it (``NodeRuntime.dispatch``).
"""

import time

from ..config import ConfigError
from ..core.errors import CommandError
from ..resp.reply import one_line
from .redact import redacted



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


def render_error(e: CommandError) -> bytes:
    return b"-" + e.code + b" " + one_line(e.message) + b"\r\n"


NOAUTH = b"-NOAUTH Authentication required.\r\n"
OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


def dispatch(ctx, client, argv) -> bytes:
    """Run one command; return its encoded reply or BLOCKED."""
    cmd = ctx.commands.get(argv[0].lower())
    if cmd is None:
        return b"-ERR unknown command '" + one_line(argv[0]) + b"'\r\n"
    arity = cmd.arity
    n = len(argv)
    if (arity > 0 and arity != n) or n < -arity:
        return b"-ERR wrong number of arguments for '" + cmd.name + b"' command\r\n"
    if not client.authenticated and not cmd.before_auth and ctx.acl.auth_required:
        return NOAUTH  # (no password any more, e.g. CONFIG SET requirepass "": nobody is locked out)
    if not client.user.unrestricted and not cmd.before_auth:
        refused = refusal(ctx, client, cmd, argv)
        if refused is not None:
            return refused
    if cmd.denyoom and ctx.node.memory.level >= 3:
        return OOM
    if ctx.monitors:
        feed_monitors(ctx, client, argv, cmd.name)
    client.last_cmd = cmd.name
    start = time.perf_counter()
    try:
        result = cmd.handler(ctx, client, argv)
    except CommandError as e:
        result = render_error(e)
        # Handlers raise shared instances (SYNTAX, E_TTL...), and a raise
        # chains the new traceback onto the one the instance carries: kept,
        # every refused command's frames, client and connection would stay
        # alive for good (a leak of ~1 KB per error).
        e.__traceback__ = None
    usec = int((time.perf_counter() - start) * 1_000_000)
    cmd.calls += 1
    cmd.usec += usec
    ctx.stats.commands += 1
    if usec >= ctx.slowlog_threshold >= 0:
        ctx.slowlog.add(ctx.node.now // 1000, usec, redacted(cmd.name, argv), ctx.config["slowlog-max-len"])
    if ctx.latency_threshold and usec // 1000 >= ctx.latency_threshold:
        ctx.latency.add(b"fast-command" if b"fast" in cmd.flags else b"command", ctx.node.now // 1000,
                        usec // 1000)
    return result


def refusal(ctx, client, cmd, argv):
    """The -NOPERM reply if ``client``'s user may not run ``argv``
    (disque.access.acl: its categories, its queues), recorded in ACL LOG; else
    None.  Commands that run before AUTH (AUTH itself) are never refused."""
    denied = client.user.denial(cmd.name, argv, ctx.node.jobs)
    if denied is None:
        return None
    reason, obj, reply = denied
    ctx.acl.record(reason, obj, client.user.name, client_info(ctx, client))
    return reply


def client_info(ctx, client) -> bytes:
    """The client as CLIENT LIST shows it (for ACL LOG)."""
    from .connection import client_line

    return client_line(ctx, client, ctx.node.now // 1000).rstrip(b"\n")


LOADING = b"-LOADING Disque is loading the dataset in memory\r\n"


def _gated(ctx, client, argv, exempt):
    """For a dispatch the runtime swaps in to refuse some commands (while
    loading, while the AOF is in error): the command of ``argv`` if the
    refusal applies; :data:`NOAUTH` if its client must authenticate first;
    None if :func:`dispatch` must run it as always (unknown, wrong number
    of arguments: the errors that come first in the original; or
    ``exempt(cmd)``); the -NOPERM reply if its user may not run it."""
    cmd = ctx.commands.get(argv[0].lower())
    if cmd is None or exempt(cmd):
        return None
    arity = cmd.arity
    n = len(argv)
    if (arity > 0 and arity != n) or n < -arity:
        return None
    if not client.authenticated and not cmd.before_auth and ctx.acl.auth_required:
        return NOAUTH
    if not client.user.unrestricted and not cmd.before_auth:
        refused = refusal(ctx, client, cmd, argv)
        if refused is not None:
            return refused
    return cmd


def _runs_while_loading(cmd):
    return cmd.loading


def _runs_while_misconf(cmd):
    return not cmd.misconf


def dispatch_loading(ctx, client, argv) -> bytes:
    """:func:`dispatch` while the node loads its AOF in the background (the
    runtime swaps it in, so the normal path pays nothing): the commands
    the original flags ``loading`` run (INFO, COMMAND, AUTH, SHUTDOWN,
    LATENCY); any other gets ``-LOADING``, after the checks that come
    first in the original (unknown command, arity, authentication)."""
    cmd = _gated(ctx, client, argv, _runs_while_loading)
    if cmd is None:
        return dispatch(ctx, client, argv)
    return cmd if isinstance(cmd, bytes) else LOADING


def dispatch_misconf(ctx, client, argv) -> bytes:
    """:func:`dispatch` while the AOF is in error (a write or an fsync
    failed; the runtime swaps it in and out): commands flagged ``write``,
    and PING, get ``-MISCONF Errors writing to the AOF file: <reason>``
    (``ctx.runtime.misconf``), after the checks that come first in the
    original (unknown command, arity, authentication, OOM); the others
    run."""
    cmd = _gated(ctx, client, argv, _runs_while_misconf)
    if cmd is None:
        return dispatch(ctx, client, argv)
    if isinstance(cmd, bytes):  # -NOAUTH, -NOPERM
        return cmd
    if cmd.denyoom and ctx.node.memory.level >= 3:
        return OOM
    return ctx.runtime.misconf


def feed_monitors(ctx, client, argv, name) -> None:
    """A MONITOR line for ``argv`` (the command ``name`` of the table) to
    every monitor but ``client``, secrets redacted (:mod:`.redact`)."""
    now = ctx.runtime.now_us()
    args = quoted(redacted(name, argv))
    line = b"+%d.%06d [%s] %s\r\n" % (now // 1_000_000, now % 1_000_000, client.addr, args)
    for m in list(ctx.monitors):
        if m is not client:
            m.conn.deliver(line)


def quoted(argv) -> bytes:
    """Arguments as MONITOR shows them: each quoted, escaped."""
    return b" ".join(b'"' + _repr(a) + b'"' for a in argv)


def _repr(arg: bytes) -> bytes:
    out = []
    for c in arg:
        if c in (34, 92):
            out.append(b"\\" + bytes((c,)))
        elif c == 10:
            out.append(b"\\n")
        elif c == 13:
            out.append(b"\\r")
        elif c == 9:
            out.append(b"\\t")
        elif 32 <= c < 127:
            out.append(bytes((c,)))
        else:
            out.append(b"\\x%02x" % c)
    return b"".join(out)


def load():
    """Import the handler modules (each registers its commands in
    ``TABLE``) and return :func:`dispatch`.  The service calls it when it
    builds a node; importing this package alone registers nothing."""
    from . import acl, admin, cluster, connection, diagnostics, info, jobs, queues  # noqa: F401

    return dispatch
