"""Users from ``user <name> <rule>...`` lines: an aclfile's
(:func:`read_file`, blank lines and ``#`` comments skipped) or the
config's ``user`` directives already split (:func:`parse_lines`).  The
words are split as the config file's; each rule is applied as ACL SETUSER
applies it, so a line that loads is one ACL SETUSER accepts.

Importing this module has the config check its ``user`` lines with these
rules (:func:`check_user_words`, registered with
:func:`disque.config.check_users_with`)."""

from .acl import AclError, User, check_name
from ..config import check_users_with
from ..config.errors import InvalidValue
from ..config.lexer import split_args, to_bytes


def parse_lines(lines, where="") -> dict:
    """Users from ``user <name> <rule>...`` lines (an aclfile's, or the
    config's ``user`` directives already split): name -> User.  AclError
    names the line; a user given twice is an error, as in Redis."""
    users = {}
    for number, words in lines:
        place = "%s:%d: " % (where, number) if where else ""
        if len(words) < 2 or words[0].lower() != b"user":
            raise AclError("%sa line must be 'user <name> <rule> ...'" % place)
        name = words[1]
        try:
            check_name(name)
        except AclError as e:
            raise AclError("%s%s" % (place, e)) from None
        if name in users:
            raise AclError("%sduplicate user '%s'" % (place, name.decode("utf-8", "replace")))
        user = User(name)
        for rule in words[2:]:
            try:
                user.apply(rule)
            except AclError as e:
                raise AclError("%sError in user declaration '%s': %s" % (
                    place, rule.decode("utf-8", "replace"), e)) from None
        users[name] = user
    return users


def read_file(path: str) -> dict:
    """The users of an aclfile (blank lines and ``#`` comments skipped);
    OSError or AclError."""
    with open(path, "rb") as f:
        data = f.read()
    lines = []
    for number, raw in enumerate(data.split(b"\n"), 1):
        line = raw.strip()
        if not line or line.startswith(b"#"):
            continue
        words = split_args(line)
        if words is None:
            raise AclError("%s:%d: unbalanced quotes" % (path, number))
        lines.append((number, words))
    return parse_lines(lines, path)


def check_user_words(words) -> None:
    """The words of a config ``user`` line (its name and rules, text) must
    load; InvalidValue with the ACL's words if they do not."""
    try:
        parse_lines([(0, [b"user"] + [to_bytes(w) for w in words])])
    except AclError as e:
        raise InvalidValue(str(e)) from None


check_users_with(check_user_words)
