"""Users and what they may do: Redis 6's ACL, fitted to a job queue.

A *user* has a name, is ``on`` or ``off``, has passwords (kept as SHA-256
hex digests, never in the clear) or ``nopass``, a set of commands it may
run, and the queue patterns it may touch.  Rules are Redis' words::

    on off nopass resetpass >password <password #<sha256 hex> !<sha256 hex>
    ~<pattern> allqueues (allkeys) resetqueues (resetkeys)
    +<command> -<command> +@<category> -@<category> allcommands nocommands
    reset

Categories fitted to a job queue (:data:`CATEGORIES`): ``@produce``
(ADDJOB), ``@consume`` (GETJOB, ACKJOB, FASTACK, NACK, WORKING),
``@inspect`` (QLEN, QPEEK, QSTAT, SHOW, JSCAN, QSCAN, INFO), ``@manage``
(PAUSE, QLIMIT, ENQUEUE, DEQUEUE, DELJOB, REVIVE), ``@admin`` (CONFIG, CLUSTER,
DEBUG, SHUTDOWN, BGREWRITEAOF, ACL, MONITOR, SLOWLOG, LATENCY, CLIENT
LIST/KILL/PAUSE, LOADJOB) and ``@connection`` (PING, TIME, COMMAND, HELLO,
the other CLIENT subcommands: what a client library needs to connect).
AUTH is never refused by the ACL: anyone may try to become someone else.

Queue patterns are Redis globs over queue names (``~orders:*``).  A
command's queues are those it names (:data:`QUEUE_ARGS`) and the queue of
every job it names (:data:`JOB_ARGS`): ACKJOB of another tenant's job is
refused as surely as ADDJOB to its queue.  A user restricted to some
queues is refused jobs this node does not know (it cannot tell whose they
are: acknowledging an unknown ID would reach the copies on other nodes).
JSCAN and QSCAN answer a restricted user with its own queues only.

Invariants:

* :attr:`User.unrestricted` is true exactly when the user may run every
  command on every queue: the dispatcher checks nothing more for it (the
  common case costs one attribute read per command).
* A user's permissions are read at each command: ACL SETUSER changes
  connected clients at once; ACL DELUSER closes their connections.
* The ``default`` user always exists.  ``requirepass`` is its password
  (set: ``resetpass >pw``; empty: ``nopass``), as in Redis.
* Nothing here knows Twisted or the node: :class:`Acl` is a registry of
  users, parsing and checks; the command layer and the HTTP side call it.

What a command needs and names (categories, queue and job arguments) is
:mod:`disque.access.categories`; users from ``user`` lines and aclfiles,
:mod:`disque.access.acl_file`.  This module stays whole (about 430 lines):
a user's rules (:class:`User`) and the registry that tries them on a copy
and applies them in place (:class:`Acl`) are one invariant, read together.
"""

import hashlib
import hmac
import os
import time

from .categories import ALL_NAMES, CATEGORIES, JOB_ARGS, QUEUE_ARGS, SPLIT, command_key
from ..config.glob import stringmatch
from ..config.lexer import quote

__all__ = ["Acl", "AclError", "User", "CATEGORIES", "hash_password"]

DEFAULT = b"default"

NOPERM_QUEUE = b"-NOPERM No permissions to access a queue\r\n"
NOPERM_JOB = b"-NOPERM No permissions to access a job\r\n"


class AclError(ValueError):
    """A rule or a file that does not parse; ``str()`` says why."""


def hash_password(password: bytes) -> bytes:
    """SHA-256 hex digest, as Redis stores passwords (``#<hex>`` rules)."""
    return hashlib.sha256(password).hexdigest().encode()


def _is_hash(text: bytes) -> bool:
    return len(text) == 64 and all(c in b"0123456789abcdef" for c in text.lower())


#: Queue names whose verdict a user keeps (the glob matching is pure Python;
#: a tenant touches few queues): past it the verdicts start again.
MAX_VERDICTS = 1024


class User:
    """One user (see the module docstring).  ``commands`` is the set of
    command keys it may run (:func:`command_key`); ``command_rules`` the
    rules that built it, in order, as ACL GETUSER shows them."""

    __slots__ = ("name", "enabled", "nopass", "passwords", "commands", "command_rules", "all_queues",
                 "queues", "unrestricted", "verdicts")

    def __init__(self, name: bytes):
        self.name = name
        self.reset()

    def reset(self):
        """Redis' ``reset``: off, no password, no command, no queue."""
        self.enabled = False
        self.nopass = False
        self.passwords = []  # SHA-256 hex digests, in the order given
        self.commands = set()
        self.command_rules = [b"-@all"]
        self.all_queues = False
        self.queues = []
        self._derive()

    def _derive(self):
        self.verdicts = {}  # queue -> may_queue's answer, for the patterns as they are now
        self.unrestricted = self.all_queues and len(self.commands) == len(ALL_NAMES)  # (a subset of them)

    # -- rules ------------------------------------------------------------

    def apply(self, rule: bytes) -> None:
        """Apply one rule; AclError (the user unchanged) if it is not one."""
        low = rule.lower()
        if low == b"on":
            self.enabled = True
        elif low == b"off":
            self.enabled = False
        elif low == b"nopass":
            self.nopass = True
            self.passwords = []
        elif low == b"resetpass":
            self.nopass = False
            self.passwords = []
        elif rule[:1] == b">":
            self._add_password(hash_password(rule[1:]))
        elif rule[:1] == b"#":
            if not _is_hash(rule[1:]):
                raise AclError("The password hash must be exactly 64 characters and contain only lowercase "
                               "hexadecimal characters")
            self._add_password(rule[1:].lower())
        elif rule[:1] in (b"<", b"!"):
            digest = hash_password(rule[1:]) if rule[:1] == b"<" else rule[1:].lower()
            if rule[:1] == b"!" and not _is_hash(digest):
                raise AclError("The password hash must be exactly 64 characters and contain only lowercase "
                               "hexadecimal characters")
            if digest not in self.passwords:
                raise AclError("no such password")
            self.passwords.remove(digest)
        elif rule[:1] == b"~":
            if rule == b"~*":
                self.all_queues, self.queues = True, []
            elif not self.all_queues and rule[1:] not in self.queues:
                self.queues.append(rule[1:])
        elif low in (b"allqueues", b"allkeys"):
            self.all_queues, self.queues = True, []
        elif low in (b"resetqueues", b"resetkeys"):
            self.all_queues, self.queues = False, []
        elif low in (b"allcommands", b"nocommands") or rule[:1] in (b"+", b"-"):
            self._command_rule(rule)
        elif low == b"reset":
            self.reset()
        elif rule[:1] in (b"&", b"%", b"(") or low in (b"allchannels", b"resetchannels"):
            raise AclError("Disque has no channels, key permissions by read/write or selectors: "
                           "queues are ~<pattern>")
        else:
            raise AclError("Syntax error")
        self._derive()

    def _add_password(self, digest):
        self.nopass = False
        if digest not in self.passwords:
            self.passwords.append(digest)

    def _command_rule(self, rule):
        low = rule.lower()
        allow = low == b"allcommands" or rule[:1] == b"+"
        if low in (b"allcommands", b"nocommands") or low[1:] == b"@all":
            names = ALL_NAMES
            self.command_rules = [b"+@all" if allow else b"-@all"]
        else:
            names = self._names(low[1:])
            self.command_rules.append(low)
        if allow:
            self.commands.update(names)
        else:
            self.commands.difference_update(names)

    @staticmethod
    def _names(what: bytes):
        if what[:1] == b"@":
            names = CATEGORIES.get(what[1:])
            if names is None:
                raise AclError("Unknown command or category name in ACL")
            return names
        base = what.partition(b"|")[0]
        if what in ALL_NAMES:
            return (what,)
        if base in SPLIT and b"|" not in what:  # the whole command: every subcommand
            return tuple(n for n in ALL_NAMES if n.partition(b"|")[0] == base)
        raise AclError("Unknown command or category name in ACL")

    # -- what it may do ---------------------------------------------------

    def check_password(self, password: bytes) -> bool:
        if not self.enabled:
            return False
        if self.nopass:
            return True
        digest = hash_password(password)
        ok = False
        for stored in self.passwords:  # no early exit: the time does not tell which matched
            ok |= hmac.compare_digest(stored, digest)
        return ok

    def may_run(self, name: bytes, argv) -> bool:
        return command_key(name, argv) in self.commands

    def may_queue(self, queue: bytes) -> bool:
        if self.all_queues:
            return True
        known = self.verdicts.get(queue)
        if known is not None:
            return known
        allowed = any(stringmatch(pattern, queue) for pattern in self.queues)
        if len(self.verdicts) >= MAX_VERDICTS:
            self.verdicts.clear()
        self.verdicts[queue] = allowed
        return allowed

    def may_job(self, job) -> bool:
        """Whether the user may touch ``job`` (one this node knows): its
        queue, and for a dead letter the queue it came from, too."""
        return self.may_queue(job.queue) and not (
            job.opts is not None and job.opts.dead_from and not self.may_queue(job.opts.dead_from))

    def denial(self, name: bytes, argv, jobs):
        """None if the user may run ``argv`` (command ``name``, its
        original name), else ``(reason, object, reply)`` for the refusal:
        reason ``command``, ``queue`` or ``job`` as ACL LOG shows it.
        ``jobs`` is the node's job table (job ID -> job)."""
        if not self.may_run(name, argv):
            key = command_key(name, argv)
            return (b"command", key, b"-NOPERM User " + self.name + b" has no permissions to run the '"
                    + key + b"' command\r\n")
        if self.all_queues:
            return None
        queues = QUEUE_ARGS.get(name)
        if queues is not None:
            for queue in queues(argv):
                if not self.may_queue(queue):
                    return b"queue", queue, NOPERM_QUEUE
        ids = JOB_ARGS.get(name)
        if ids is not None:
            for job_id in ids(argv):
                job = jobs.get(job_id)
                if job is None or not self.may_job(job):
                    return b"job", job_id, NOPERM_JOB
        return None

    # -- as ACL shows it --------------------------------------------------

    def flags(self):
        out = [b"on" if self.enabled else b"off"]
        if self.nopass:
            out.append(b"nopass")
        if self.all_queues:
            out.append(b"allqueues")
        if self.command_rules == [b"+@all"]:
            out.append(b"allcommands")
        return out

    def queue_rules(self) -> bytes:
        return b"~*" if self.all_queues else b" ".join(_word(b"~" + p) for p in self.queues)

    def describe(self) -> bytes:
        """The user as one ACL LIST line (and as an aclfile line): rules that
        rebuild it exactly."""
        words = [b"user", self.name, b"on" if self.enabled else b"off"]
        words += [b"nopass"] if self.nopass else [b"#" + p for p in self.passwords]
        queues = self.queue_rules()
        words += [queues] if queues else [b"resetqueues"]
        words += self.command_rules
        return b" ".join(words)


class LogEntry:
    """One ACL LOG entry: denials of the same kind, by the same user, from
    the same client, on the same object, within a minute, share one
    entry (``count``), as in Redis."""

    __slots__ = ("count", "reason", "context", "object", "username", "created", "updated", "client_info",
                 "entry_id")

    def __init__(self, reason, obj, username, client_info, now, entry_id):
        self.count = 1
        self.reason = reason
        self.context = b"toplevel"
        self.object = obj
        self.username = username
        self.client_info = client_info
        self.created = self.updated = now
        self.entry_id = entry_id


GROUP_WINDOW = 60.0  # seconds within which a repeated denial adds to its entry


class Acl:
    """The users of one node, and the recent denials (ACL LOG)."""

    def __init__(self, clock=time.time):
        self.clock = clock
        self.users = {}
        self.log = []  # LogEntry, newest first
        self.log_max = 128
        self._next_entry = 0
        self.default = self._fresh_default()
        self.users[DEFAULT] = self.default

    @staticmethod
    def _fresh_default() -> User:
        user = User(DEFAULT)
        for rule in (b"on", b"nopass", b"~*", b"+@all"):
            user.apply(rule)
        return user

    @property
    def default_nopass(self) -> bool:
        """The default user needs no password (protected mode's test)."""
        return self.default.nopass

    @property
    def auth_required(self) -> bool:
        """New connections must AUTH first: the default user is off or has
        a password."""
        user = self.default
        return not (user.enabled and user.nopass)

    def set_requirepass(self, password) -> None:
        """``requirepass``: the default user's only password, or ``nopass``."""
        rules = [b"resetpass", b">" + password] if password else [b"nopass"]
        for rule in rules:
            self.default.apply(rule)

    # -- users ------------------------------------------------------------

    def setuser(self, name: bytes, rules) -> User:
        """ACL SETUSER: create the user if needed and apply ``rules`` in
        order, all or none (an AclError names the rule that failed)."""
        check_name(name)
        current = self.users.get(name)
        trial = User(name)
        if current is not None:
            _copy_user(current, trial)
        for rule in rules:
            try:
                trial.apply(rule)
            except AclError as e:
                raise AclError("Error in ACL SETUSER modifier '%s': %s" % (rule.decode("utf-8", "replace"), e))
        if current is None:
            self.users[name] = current = trial
        else:
            _copy_user(trial, current)  # in place: connected clients see the change at once
        return current

    def deluser(self, name: bytes) -> bool:
        if name == DEFAULT:
            raise AclError("The 'default' user cannot be removed")
        return self.users.pop(name, None) is not None

    def authenticate(self, name: bytes, password: bytes):
        """The user, if the pair is right and the user is on; else None."""
        user = self.users.get(name)
        if user is None:
            hash_password(password)  # about the same time for an unknown user
            return None
        return user if user.check_password(password) else None

    def lines(self):
        """Every user as an ACL LIST line, default first, then by name."""
        return [self.users[DEFAULT].describe()] + [self.users[n].describe() for n in sorted(self.users)
                                                   if n != DEFAULT]

    def replace(self, users) -> None:
        """Make ``users`` (name -> User, parsed elsewhere) the node's users,
        keeping the objects of those that stay (their clients follow); a
        missing default user is a fresh one."""
        users = dict(users)
        users.setdefault(DEFAULT, self._fresh_default())
        for name, user in users.items():
            current = self.users.get(name)
            if current is not None:
                _copy_user(user, current)
                users[name] = current
        self.users = users
        self.default = users[DEFAULT]

    # -- ACL LOG ----------------------------------------------------------

    def record(self, reason: bytes, obj: bytes, username: bytes, client_info: bytes) -> None:
        now = self.clock()
        for entry in self.log:
            if entry.reason == reason and entry.object == obj and entry.username == username and \
                    now - entry.updated < GROUP_WINDOW and entry.client_info.split(b" ", 2)[:2] == \
                    client_info.split(b" ", 2)[:2]:
                entry.count += 1
                entry.updated = now
                entry.client_info = client_info
                return
        self.log.insert(0, LogEntry(reason, obj, username, client_info, now, self._next_entry))
        self._next_entry += 1
        del self.log[self.log_max:]


def _word(rule: bytes) -> bytes:
    """``rule`` as a word split_args reads back (quoted if it must be)."""
    if rule and all(32 < c < 127 and c not in b"\"'\\" for c in rule):
        return rule
    return quote(rule)


def _copy_user(src: User, dst: User) -> None:
    """``dst`` gets ``src``'s rules (not its name), its verdicts forgotten."""
    for slot in User.__slots__:
        if slot != "name":
            value = getattr(src, slot)
            setattr(dst, slot, value.copy() if isinstance(value, (list, set)) else value)
    dst.verdicts = {}


def check_name(name: bytes) -> None:
    """Refuse a user name a line could not carry (empty, spaces, controls)."""
    if not name or any(c <= 32 or c == 127 for c in name):
        raise AclError("Usernames can't contain spaces or null characters")


def generate_password(bits: int = 256) -> bytes:
    """ACL GENPASS: ``bits`` random bits as hex."""
    return os.urandom((bits + 7) // 8).hex()[:(bits + 3) // 4].encode()
