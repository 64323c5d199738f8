"""What MONITOR, the slow log and the audit lines never show: secrets in a
command's arguments, replaced by ``(redacted)`` as Redis 7 does.

* ``AUTH``: every argument (``AUTH password`` and ``AUTH username
  password``: Redis hides the user name too).
* ``ACL SETUSER name rule...``: every rule (Redis hides every argument
  from the third on: a rule may be ``>password`` or ``#hash``).
* ``CONFIG SET name value ...``: the value of a secret directive
  (:func:`disque.config.is_secret`: ``requirepass``, ``cluster-password``).

No CLUSTER subcommand carries a secret (the bus's ``cluster-password`` is
set by CONFIG SET).  Which rule applies is decided by the command's name
in the table (its original name, whatever ``rename-command`` calls it),
and only where arguments are shown: a MONITOR line, a slow log entry, an
audit line -- never on the path of a request.
"""

from ..config import is_secret

REDACTED = b"(redacted)"


def _all_after(first):
    def redact(argv):
        return list(argv[:first]) + [REDACTED] * (len(argv) - first)
    return redact


def _acl(argv):
    if len(argv) > 3 and argv[1].lower() == b"setuser":
        return _all_after(3)(argv)
    return argv


def _config(argv):
    if len(argv) < 4 or argv[1].lower() != b"set":
        return argv
    shown = list(argv)
    for i in range(2, len(argv) - 1, 2):  # name value pairs
        if is_secret(argv[i]):
            shown[i + 1] = REDACTED
    return shown


#: Command name (the original's) -> argv -> the argv to show.
RULES = {b"auth": _all_after(1), b"acl": _acl, b"config": _config}


def redacted(name: bytes, argv):
    """``argv`` of the command named ``name``, as it may be shown."""
    rule = RULES.get(name)
    return argv if rule is None else rule(argv)
