"""Commands that administer the node, each audited: CONFIG (GET, SET,
RESETSTAT, REWRITE), SHUTDOWN, BGREWRITEAOF and DEBUG (where
``enable-debug-command`` allows it)."""

from ..config import ConfigSetError
from ..access.protection import DEBUG_NOT_ALLOWED, debug_allowed
from ..resp import reply
from . import TABLE, command
from .audit import audit_command
from .contract import BLOCKED
from .jobs import SYNTAX


@command("config", -2, "readonly admin")
def config(ctx, client, argv):
    sub = argv[1].lower()
    argc = len(argv)
    try:
        if sub == b"get":
            if argc != 3:
                return reply.err(b"Wrong number of arguments for CONFIG GET")
            pairs = ctx.config.get_all(argv[2])
            return reply.bulk_array(v for pair in pairs for v in pair)
        if sub == b"set":
            if argc != 4:
                return reply.err(b"Wrong number of arguments for CONFIG SET")
            ctx.config.set(argv[2], argv[3])
            audit_command(ctx, client, b"config", argv)
            return reply.OK
        if sub == b"resetstat":
            if argc != 2:
                return reply.err(b"Wrong number of arguments for CONFIG RESETSTAT")
            ctx.stats.reset()
            for cmd in TABLE.values():
                cmd.calls = cmd.usec = 0
            audit_command(ctx, client, b"config", argv)
            return reply.OK
        if sub == b"rewrite":
            if argc != 2:
                return reply.err(b"Wrong number of arguments for CONFIG REWRITE")
            ctx.config.rewrite()
            audit_command(ctx, client, b"config", argv)
            return reply.OK
    except ConfigSetError as e:
        return reply.err(e.args[0])
    return reply.err(b"CONFIG subcommand must be one of GET, SET, RESETSTAT, REWRITE")


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
    sub = argv[1].lower()
    argc = len(argv)
    if sub == b"flushall" and argc == 2:
        ctx.node.flush_all()
        ctx.runtime.flushed()
        return reply.OK
    if sub == b"sleep" and argc == 3:
        try:
            seconds = float(argv[2])
        except ValueError:
            seconds = 0.0
        ctx.runtime.sleep(max(seconds, 0.0))
        return reply.OK
    if sub == b"error" and argc == 3:
        return reply.error(argv[2])
    if sub == b"structsize" and argc == 2:
        return reply.bulk(ctx.runtime.struct_sizes())
    if sub == b"jobs" and argc == 2:
        return reply.integer(len(ctx.node.jobs))
    return _debug_error(argv[1])
