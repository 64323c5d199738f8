"""The one dispatch: every request goes through it, whatever its door.

:func:`dispatch` runs one request for one client and applies, in this
order and only here, what the original checks and records around a
command: unknown command, arity, authentication (``-NOAUTH``), the ACL
(``-NOPERM``, recorded in ACL LOG), ``-OOM`` for a ``denyoom`` command
past ``maxmemory``, the MONITOR line, then the handler, then the command
statistics (INFO commandstats, the ``commands`` counter), the slow log and
the latency monitor; then the clients blocked on queues that got jobs are
served (GETJOB), whichever door the command came through.  :func:`dispatch_loading` and :func:`dispatch_misconf`
are the same dispatch while the AOF loads or fails: the runtime swaps the
one in force (``NodeRuntime.run_command`` calls it), so the normal path
checks nothing more.

Invariants: no request runs a handler but through one of these three
(RESP, the HTTP side's actions and the in-memory test clients all reach
them through ``run_command``); what they return is the handler's answer,
:mod:`.contract`'s three kinds; a refused request never runs its handler
and never counts in the statistics.
"""

from time import perf_counter

from ..core.errors import CommandError
from ..resp.reply import one_line
from .redact import redacted
from .shown import client_info, quoted


def render_error(e: CommandError) -> bytes:
    return b"-" + e.code + b" " + one_line(e.message) + b"\r\n"


NOAUTH = b"-NOAUTH Authentication required.\r\n"
OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"


def dispatch(ctx, client, argv) -> bytes:
    """Run one command; return its answer (:mod:`.contract`: encoded
    reply, ``BLOCKED`` or a ``ReplySlot``).  Once the handler ran, the
    clients blocked on queues it gave jobs to are served."""
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
            if ctx.clock:
                ctx.clock = -1.0  # (the ACL LOG entry is no part of the next command)
            return refused
    if cmd.denyoom and ctx.node.memory.level >= 3:
        return OOM
    start = ctx.clock  # within a run of commands, the previous one's end (run_of_commands)
    in_run = start != 0.0
    if ctx.monitors:
        feed_monitors(ctx, client, argv, cmd.name)
        start = 0.0
    if start <= 0.0:
        start = perf_counter()
    client.last_cmd = cmd.name
    try:
        result = cmd.handler(ctx, client, argv)
    except CommandError as e:
        result = render_error(e)
        # Handlers raise shared instances (SYNTAX, E_TTL...), and a raise
        # chains the new traceback onto the one the instance carries: kept,
        # every refused command's frames, client and connection would stay
        # alive for good (a leak of ~1 KB per error).
        e.__traceback__ = None
    end = perf_counter()
    usec = int((end - start) * 1_000_000)
    cmd.calls += 1
    cmd.usec += usec
    ctx.stats.commands += 1
    if usec >= ctx.slowlog_threshold >= 0:
        ctx.slowlog.add(ctx.node.now // 1000, usec, redacted(cmd.name, argv), ctx.config["slowlog-max-len"])
        end = -1.0
    if ctx.latency_threshold and usec // 1000 >= ctx.latency_threshold:
        ctx.latency.add(b"fast-command" if b"fast" in cmd.flags else b"command", ctx.node.now // 1000,
                        usec // 1000)
        end = -1.0
    node = ctx.node
    if node.ready:  # the command gave jobs to queues clients wait on (ENQUEUE, NACK, ADDJOB...)
        node.getjob.serve_ready()
        end = -1.0
    if in_run:  # what ran after ``end`` (logs, blocked clients served) is no part of the next command
        ctx.clock = end
    return result


class run_of_commands:
    """``with run_of_commands(ctx):`` around requests dispatched one after
    the other, as the RESP protocol runs a read's pipeline: each command's
    time (INFO commandstats, SLOWLOG, LATENCY) then starts where the
    previous one's ended -- one clock read per command instead of two (a
    read costs 0.1-0.2 us on the benchmark VM).  ``ctx.clock`` is 0.0
    outside a run, -1.0 in a run when the next command reads its own
    start, else the previous command's end.  What lies between is the
    loop's bookkeeping and this command's front-door checks; a command
    after one that wrote the slow log or the latency monitor or served
    blocked clients, or with MONITOR on, reads its own start.  A run
    nested in a command (blocked clients served, their pipelines resumed)
    leaves 0.0; the command it ran in puts its own end back.
    ``tests/protocol/test_command_clock.py`` pins the times to those of
    commands dispatched alone."""

    __slots__ = ("ctx",)

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        self.ctx.clock = -1.0  # in a run; the first command reads its start

    def __exit__(self, *exc):
        self.ctx.clock = 0.0


def may_run(ctx, user, argv) -> bool:
    """Whether ``user`` may run ``argv`` (its categories, its queues),
    without recording anything: for a read of the HTTP side, checked as
    the command it stands for before :func:`refusal` records a denial."""
    return user.unrestricted or user.denial(argv[0].lower(), argv, ctx.node.jobs) is None


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
