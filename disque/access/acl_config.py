"""The node's users from its configuration: ``requirepass``, ``user`` lines
or an ``aclfile``, ``acllog-max-len`` (docs/security.md, "Users and
permissions").

:func:`acl_from_config` builds the :class:`~disque.access.acl.Acl` a node starts
with and keeps it following CONFIG SET (``requirepass`` is the default
user's password, as in Redis).  Users come from ``user`` lines in the
config file or from the ``aclfile``, never both (as Redis refuses it: two
sources of truth would disagree after ``ACL SAVE``).  :func:`sync_config`
writes the users back into the config's ``user`` value, so CONFIG REWRITE
keeps what ACL SETUSER did when there is no aclfile.
"""

import os
import time

from .acl import DEFAULT, Acl, AclError
from .acl_file import parse_lines, read_file
from ..config import ConfigError, split_args


def aclfile_path(config) -> str:
    """The aclfile's path ("" if none): relative paths are in ``dir``."""
    path = config["aclfile"]
    return os.path.join(config["dir"], path) if path else ""


def _config_users(config):
    lines = [(n, [b"user"] + [w.encode("utf-8", "surrogateescape") for w in words])
             for n, words in enumerate(config["user"], 1)]
    return parse_lines(lines, "user directive")


def acl_from_config(config, clock=None) -> Acl:
    """The users of a node with ``config``; ConfigError if they cannot be
    had (both sources given, an aclfile that does not read or parse)."""
    acl = Acl(clock or time.time)
    path = aclfile_path(config)
    if path and config["user"]:
        raise ConfigError("users are declared both with 'user' lines and in the aclfile %s: use one of them "
                          "(ACL SAVE writes the aclfile, CONFIG REWRITE the 'user' lines)" % path)
    config.on_change("requirepass", lambda password: acl.set_requirepass(
        password.encode("utf-8", "surrogateescape")))
    config.on_change("acllog-max-len", lambda n: _set_log_max(acl, n))
    try:
        users = read_file(path) if path else _config_users(config)
    except OSError as e:
        raise ConfigError("can't read the aclfile %s: %s" % (path, e.strerror or e)) from None
    except AclError as e:
        raise ConfigError(str(e)) from None
    if users:
        if DEFAULT not in users:  # the default user as requirepass made it
            users[DEFAULT] = acl.default
        acl.replace(users)
    return acl


def _set_log_max(acl, n):
    acl.log_max = n
    del acl.log[n:]


def load_file(acl, config) -> None:
    """ACL LOAD: the aclfile's users replace the node's, all or none
    (AclError or OSError leave them as they were)."""
    acl.replace(read_file(aclfile_path(config)))


def save_file(acl, config) -> None:
    """ACL SAVE: every user, as ACL LIST shows them, written atomically."""
    from ..io.files import OS, atomic_write

    atomic_write(OS, aclfile_path(config), b"".join(line + b"\n" for line in acl.lines()))


def sync_config(acl, config) -> None:
    """The users into the config's ``user`` value (for CONFIG REWRITE):
    every user but a default one that ``requirepass`` alone describes."""
    plain = Acl()
    plain.set_requirepass(config["requirepass"].encode("utf-8", "surrogateescape"))
    lines = [line for line in acl.lines()
             if line.split(b" ", 2)[1] != DEFAULT or line != plain.default.describe()]
    config.store("user", [[w.decode("utf-8", "surrogateescape") for w in split_args(line)[1:]] for line in lines])
