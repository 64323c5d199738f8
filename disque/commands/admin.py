"""Commands that administer the node, each audited: CONFIG (GET, SET,
RESETSTAT, REWRITE), SHUTDOWN, BGREWRITEAOF and DEBUG (where
``enable-debug-command`` allows it)."""

from ..config import ConfigSetError
from ..access.protection import DEBUG_NOT_ALLOWED, debug_allowed
from ..resp import reply
from ..contract import BLOCKED
from . import TABLE, command
from .args import subcommand
from .audit import audit_command
from .jobs import SYNTAX


CONFIG_ARITY = {b"get": 3, b"set": 4, b"resetstat": 2, b"rewrite": 2}
E_CONFIG = reply.err(b"CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")


@command("config", -2, "readonly admin")
def config(ctx, client, argv):
    sub, fits = subcommand(argv, CONFIG_ARITY)
    if sub is None:
        return E_CONFIG
    if not fits:
        return reply.err(b"Wrong number of arguments for CONFIG " + sub.upper())
    try:
        if sub == b"get":
            pairs = ctx.config.get_all(argv[2])
            return reply.bulk_array(v for pair in pairs for v in pair)
        if sub == b"set":
            ctx.config.set(argv[2], argv[3])
        elif sub == b"resetstat":
            ctx.stats.reset()
            for cmd in TABLE.values():
                cmd.calls = cmd.usec = 0
        elif sub == b"rewrite":
            ctx.config.rewrite()
        else:
            return E_CONFIG
    except ConfigSetError as e:
        return reply.err(e.args[0])
    audit_command(ctx, client, b"config", argv)
    return reply.OK


@command("shutdown", -1, "readonly admin loading")
def shutdown(ctx, client, argv):
    if len(argv) > 2:
        raise SYNTAX
    mode = argv[1].lower() if len(argv) == 2 else b""
    if mode not in (b"", b"save", b"nosave", b"rewrite-aof"):
        raise SYNTAX
    audit_command(ctx, client, b"shutdown", argv)
    error = ctx.runtime.shutdown(mode.decode())
    if error:
        return reply.err(error)
    return BLOCKED  # the connection closes with the process


@command("bgrewriteaof", 1, "readonly admin")
def bgrewriteaof(ctx, client, argv):
    audit_command(ctx, client, b"bgrewriteaof", argv)
    return ctx.runtime.bgrewriteaof()


DEBUG_ARITY = {b"flushall": 2, b"sleep": 3, b"error": 3, b"structsize": 2, b"jobs": 2}


def _debug_error(sub):
    return reply.err(b"Unknown DEBUG subcommand or wrong number of arguments for '" + sub + b"'")


@command("debug", -2, "admin")
def debug(ctx, client, argv):
    """DEBUG, where ``enable-debug-command`` allows it (:mod:`disque.access.protection`);
    every call is audited, refused ones too."""
    if not debug_allowed(ctx, client):
        audit_command(ctx, client, b"debug", argv, "refused: enable-debug-command is %s"
                      % ctx.config["enable-debug-command"])
        return DEBUG_NOT_ALLOWED
    audit_command(ctx, client, b"debug", argv)
    sub, fits = subcommand(argv, DEBUG_ARITY)
    if not fits:
        return _debug_error(argv[1])
    if sub == b"flushall":
        ctx.node.flush_all()
        ctx.runtime.flushed()
        return reply.OK
    if sub == b"sleep":
        try:
            seconds = float(argv[2])
        except ValueError:
            seconds = 0.0
        ctx.runtime.sleep(max(seconds, 0.0))
        return reply.OK
    if sub == b"error":
        return reply.error(argv[2])
    if sub == b"structsize":
        return reply.bulk(ctx.runtime.struct_sizes())
    if sub == b"jobs":
        return reply.integer(len(ctx.node.jobs))
    return _debug_error(argv[1])
