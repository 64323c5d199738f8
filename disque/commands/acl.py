"""ACL: the node's users (disque/access/acl.py), in Redis 6's words.

``ACL SETUSER name rule...``, ``GETUSER``, ``DELUSER``, ``LIST``, ``USERS``,
``WHOAMI``, ``CAT [category]``, ``LOG [count | RESET]``, ``SAVE``, ``LOAD``,
``GENPASS [bits]``.  Users live on this node only: a cluster keeps them in
step with the same aclfile on every node, or ACL SAVE run on each
(docs/security.md).  Without an aclfile, every change is written into the
config's ``user`` lines, so CONFIG REWRITE keeps it.
"""

from ..access.acl import CATEGORIES, AclError, generate_password
from ..access.acl_config import aclfile_path, load_file, save_file, sync_config
from ..resp import reply
from . import command
from .args import subcommand
from .audit import audit_command

E_NOFILE = (b"-ERR This Disque instance is not configured to use an ACL file. You may want to specify users "
            b"via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a configuration "
            b"file set) in order to store users in the configuration.\r\n")


def _err(text: str) -> bytes:
    return reply.err(text.encode("utf-8", "replace"))


def _changed(ctx, client, argv):
    """After a change of users: the config follows (without an aclfile),
    clients of users that are gone are closed, and the change is audited
    (passwords redacted)."""
    if not ctx.config["aclfile"]:
        sync_config(ctx.acl, ctx.config)
    users = set(map(id, ctx.acl.users.values()))
    for other in list(ctx.clients.values()):
        if id(other.user) not in users:
            other.conn.close()
    audit_command(ctx, client, b"acl", argv)


def _setuser(ctx, client, argv):
    try:
        ctx.acl.setuser(argv[2], argv[3:])
    except AclError as e:
        return _err(str(e))
    _changed(ctx, client, argv)
    return reply.OK


def _getuser(ctx, client, argv):
    user = ctx.acl.users.get(argv[2])
    if user is None:
        return reply.NULL_BULK
    return reply.array([
        reply.bulk(b"flags"), reply.array(map(reply.bulk, user.flags())),
        reply.bulk(b"passwords"), reply.array(map(reply.bulk, user.passwords)),
        reply.bulk(b"commands"), reply.bulk(b" ".join(user.command_rules)),
        reply.bulk(b"queues"), reply.bulk(user.queue_rules()),
    ])


def _deluser(ctx, client, argv):
    try:
        gone = sum(ctx.acl.deluser(name) for name in dict.fromkeys(argv[2:]))
    except AclError as e:
        return _err(str(e))
    if gone:
        _changed(ctx, client, argv)
    return reply.integer(gone)


def _list(ctx, client, argv):
    return reply.array(map(reply.bulk, ctx.acl.lines()))


def _users(ctx, client, argv):
    return reply.array(map(reply.bulk, sorted(ctx.acl.users)))


def _whoami(ctx, client, argv):
    return reply.bulk(client.user.name)


def _cat(ctx, client, argv):
    if len(argv) == 2:
        return reply.array(map(reply.bulk, CATEGORIES))
    names = CATEGORIES.get(argv[2].lower())
    if names is None or len(argv) > 3:
        return _err("Unknown category '%s'" % argv[2].decode("utf-8", "replace"))
    return reply.array(map(reply.bulk, names))


def _log(ctx, client, argv):
    count = len(ctx.acl.log)
    if len(argv) == 3:
        if argv[2].lower() == b"reset":
            ctx.acl.log.clear()
            return reply.OK
        try:
            count = int(argv[2])
        except ValueError:
            count = -1
        if count < 0:
            return reply.err(b"value is out of range, must be positive")
    now = ctx.acl.clock()
    entries = []
    for e in ctx.acl.log[:count]:
        entries.append(reply.array([
            reply.bulk(b"count"), reply.integer(e.count),
            reply.bulk(b"reason"), reply.bulk(e.reason),
            reply.bulk(b"context"), reply.bulk(e.context),
            reply.bulk(b"object"), reply.bulk(e.object),
            reply.bulk(b"username"), reply.bulk(e.username),
            reply.bulk(b"age-seconds"), reply.bulk(b"%.3f" % max(now - e.created, 0.0)),
            reply.bulk(b"client-info"), reply.bulk(e.client_info),
            reply.bulk(b"entry-id"), reply.integer(e.entry_id),
            reply.bulk(b"timestamp-created"), reply.integer(int(e.created * 1000)),
            reply.bulk(b"timestamp-last-updated"), reply.integer(int(e.updated * 1000)),
        ]))
    return reply.array(entries)


def _save(ctx, client, argv):
    if not ctx.config["aclfile"]:
        return E_NOFILE
    try:
        save_file(ctx.acl, ctx.config)
    except OSError as e:
        return _err("There was an error trying to save the ACLs. Please check the server logs for more "
                    "information (%s: %s)" % (aclfile_path(ctx.config), e.strerror or e))
    audit_command(ctx, client, b"acl", argv, "to %s" % aclfile_path(ctx.config))
    return reply.OK


def _load(ctx, client, argv):
    if not ctx.config["aclfile"]:
        return E_NOFILE
    try:
        load_file(ctx.acl, ctx.config)
    except OSError as e:
        return _err("Error loading ACLs, the aclfile %s: %s" % (aclfile_path(ctx.config), e.strerror or e))
    except AclError as e:
        return _err("Error loading ACLs, nothing changed: %s" % e)
    _changed(ctx, client, argv)
    return reply.OK


def _genpass(ctx, client, argv):
    bits = 256
    if len(argv) == 3:
        try:
            bits = int(argv[2])
        except ValueError:
            bits = 0
        if not 0 < bits <= 4096:
            return reply.err(b"ACL GENPASS argument must be the number of bits for the output password, "
                             b"a positive number up to 4096")
    return reply.bulk(generate_password(bits))


def _wrong_args(argv):
    return reply.err(b"Unknown subcommand or wrong number of arguments for '" + argv[1] + b"'. Try ACL HELP.")


SUBCOMMANDS = {
    b"setuser": _setuser, b"getuser": _getuser, b"deluser": _deluser, b"list": _list, b"users": _users,
    b"whoami": _whoami, b"cat": _cat, b"log": _log, b"save": _save, b"load": _load, b"genpass": _genpass,
}
ARITY = {
    b"setuser": -3, b"getuser": 3, b"deluser": -3, b"list": 2, b"users": 2, b"whoami": 2, b"cat": -2,
    b"log": (2, 3), b"save": 2, b"load": 2, b"genpass": (2, 3),
}


@command("acl", -2, "admin")
def acl(ctx, client, argv):
    sub, fits = subcommand(argv, ARITY)
    if not fits:
        return _wrong_args(argv)
    return SUBCOMMANDS[sub](ctx, client, argv)
