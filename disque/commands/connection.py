"""Commands about the caller's connection and the other clients: PING,
AUTH (the default user or a named one, through the ACL), CLIENT (LIST,
KILL, names, PAUSE, REPLY modes) and MONITOR."""

import re

from ..resp import reply
from ..contract import REPLY_OFF, REPLY_ON, REPLY_SKIP_NEXT
from . import command
from .audit import audit_command
from .shown import client_info, client_line
from .args import parse_int_or_error, parse_ll, subcommand
from .jobs import SYNTAX


@command("ping", -1, "readonly fast")
def ping(ctx, client, argv):
    if len(argv) > 2:
        return b"-ERR wrong number of arguments for 'ping' command\r\n"
    return reply.bulk(argv[1]) if len(argv) == 2 else reply.PONG


@command("auth", -2, "readonly loading fast", before_auth=True, shown_arity=2)
def auth(ctx, client, argv):
    """AUTH password (the default user, as the original) or AUTH username
    password (Redis 6).  A failed AUTH leaves the client unauthenticated,
    as the original does."""
    if len(argv) > 3:
        raise SYNTAX
    acl = ctx.acl
    if len(argv) == 2:
        if acl.default_nopass:
            return reply.err(b"Client sent AUTH, but no password is set")
        name, password, wrong = DEFAULT_USER, argv[1], WRONG_PASSWORD
    else:
        name, password, wrong = argv[1], argv[2], WRONGPASS
    refused = ctx.runtime.auth_gate(client)
    if refused is not None:
        return refused
    user = acl.authenticate(name, password)
    if user is not None:
        client.authenticated = True
        client.user = user
        ctx.runtime.auth_succeeded(client)
        return reply.OK
    client.authenticated = False
    acl.record(b"auth", b"AUTH", name, client_info(ctx, client))
    return ctx.runtime.auth_failed(client, wrong)


DEFAULT_USER = b"default"
WRONG_PASSWORD = b"-ERR invalid password\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"


CLIENT_SYNTAX = b"-ERR Syntax error, try CLIENT (LIST | KILL ip:port | GETNAME | SETNAME connection-name)\r\n"
_BAD_NAME = re.compile(rb"[^!-~]")


CLIENT_ARITY = {b"list": 2, b"getname": 2, b"setname": 3, b"kill": -3, b"pause": 3, b"reply": 3, b"setinfo": 4,
                b"id": 2, b"no-evict": 3}


@command("client", -2, "readonly admin")
def client_(ctx, client, argv):
    sub, fits = subcommand(argv, CLIENT_ARITY)
    if not fits:
        return CLIENT_SYNTAX
    if sub == b"list":
        now_s = ctx.node.now // 1000
        return reply.bulk(b"".join(client_line(ctx, c, now_s) for c in ctx.clients.values()))
    if sub == b"getname":
        return reply.bulk(client.name) if client.name else reply.NULL_BULK
    if sub == b"setname":
        if _BAD_NAME.search(argv[2]):
            return reply.err(b"Client names cannot contain spaces, newlines or special characters.")
        client.name = argv[2]
        return reply.OK
    if sub == b"kill":
        result = client_kill(ctx, client, argv)
        audit_command(ctx, client, b"client", argv, "answered " + result.decode(errors="replace").strip())
        return result
    if sub == b"pause":
        n = parse_ll(argv[2])
        if n is None or n < 0:
            return reply.err(b"timeout is not an integer or out of range")
        ctx.runtime.pause_clients(n)
        return reply.OK
    if sub == b"reply":
        mode = argv[2].lower()
        modes = {b"on": REPLY_ON, b"off": REPLY_OFF, b"skip": REPLY_SKIP_NEXT}
        if mode not in modes:
            raise SYNTAX
        client.reply_mode = modes[mode]
        return reply.OK
    if sub == b"setinfo":
        attr = argv[2].lower()
        if attr not in (b"lib-name", b"lib-ver"):
            return reply.err(b"Unrecognized option '" + argv[2] + b"'")
        if _BAD_NAME.search(argv[3]):
            return reply.err(b"lib-name and lib-ver cannot contain spaces, newlines or special characters.")
        setattr(client, "lib_name" if attr == b"lib-name" else "lib_ver", argv[3])
        return reply.OK
    if sub == b"id":
        return reply.integer(client.id)
    if sub == b"no-evict" and argv[2].lower() in (b"on", b"off"):
        client.no_evict = argv[2].lower() == b"on"  # maxmemory-clients never closes it (Redis 7)
        return reply.OK
    return CLIENT_SYNTAX


def client_kill(ctx, client, argv):
    if len(argv) == 3:  # old form: CLIENT KILL addr
        for c in list(ctx.clients.values()):
            if c.addr == argv[2]:
                c.conn.close()
                return reply.OK
        return reply.err(b"No such client")
    if len(argv) % 2:
        raise SYNTAX
    want_id = want_addr = want_type = None
    skipme = True
    for i in range(2, len(argv), 2):
        opt, value = argv[i].lower(), argv[i + 1]
        if opt == b"id":
            want_id = parse_int_or_error(value)
        elif opt == b"addr":
            want_addr = value
        elif opt == b"type":
            want_type = value.lower()
            if want_type not in (b"normal", b"pubsub", b"slave"):
                return reply.err(b"Unknown client type '" + value + b"'")
        elif opt == b"skipme":
            v = value.lower()
            if v not in (b"yes", b"no"):
                raise SYNTAX
            skipme = v == b"yes"
        else:
            raise SYNTAX
    killed = 0
    for c in list(ctx.clients.values()):
        if want_id is not None and c.id != want_id:
            continue
        if want_addr is not None and c.addr != want_addr:
            continue
        if want_type is not None and want_type != b"normal":
            continue
        if c is client and skipme:
            continue
        c.conn.close()
        killed += 1
    return reply.integer(killed)


@command("monitor", 1, "readonly admin")
def monitor(ctx, client, argv):
    if not client.monitor:
        client.monitor = True
        ctx.monitors.append(client)
    return reply.OK
