"""What a directive is (:class:`Spec`, one row of ``SPECS``) and the kinds of
value it may take (``KINDS``): for each kind, how file arguments parse, how
CONFIG GET renders the value (byte for byte as Disque 1.0-rc1), and how
CONFIG REWRITE writes it back.  Invariant: a kind's ``dump`` writes lines its
``parse`` reads back to the same value.  Values are native Python objects."""

import re
from dataclasses import dataclass
from typing import Callable, NamedTuple

from .errors import InvalidValue, require
from .lexer import format_memory, parse_memory, quote, to_bytes

_INTEGER = re.compile(r"-?[0-9]+")
INT32_MAX, INT64_MAX = 2 ** 31 - 1, 2 ** 63 - 1


@dataclass(frozen=True, eq=False)          # eq=False: hashable by identity
class Spec:
    """One directive: its name, kind, default and how CONFIG treats it."""

    name: str
    kind: str
    default: object
    settable: bool = False                 # CONFIG SET accepts it
    lo: int = -2 ** 63
    hi: int = INT64_MAX
    choices: tuple = ()
    check: "Callable[[str], None] | None" = None   # extra validation of strings
    clamp: bool = False                    # out-of-range ints are clamped, not refused
    nullable: bool = False                 # "" means unset: not written by REWRITE
    get: bool = True                       # listed by CONFIG GET
    rewrite: bool = True                   # handled by CONFIG REWRITE
    original: bool = True                  # a parameter of the original server
    show: "Callable | None" = None         # CONFIG GET rendering, if not the kind's
    runtime: "Callable | None" = None      # CONFIG SET parsing, if not the kind's
    fixed: str = ""                        # not implemented, for this reason: only the
                                           # default is accepted, never settable


class Kind(NamedTuple):
    """A kind of value: its file arguments, parsing, GET rendering and REWRITE lines."""

    nargs: int                             # exact count; -1 means one or more
    usage: str
    parse: Callable                        # (spec, args, current) -> value, raises InvalidValue
    show: Callable                         # value -> str
    dump: Callable                         # (spec, value) -> [(bytes, force)]


def _int_requirement(spec):
    if spec.clamp:
        return "must be an integer (values outside %d..%d are clamped)" % (spec.lo, spec.hi)
    if spec.hi != INT64_MAX:
        return "must be an integer between %d and %d" % (spec.lo, spec.hi)
    return "must be an integer" + (" >= %d" % spec.lo if spec.lo > -2 ** 63 else "")


def _parse_int(spec, args, cur):
    require(_INTEGER.fullmatch(args[0]), _int_requirement(spec))
    v = int(args[0])
    return min(max(v, spec.lo), spec.hi) if spec.clamp else \
        require(spec.lo <= v <= spec.hi, _int_requirement(spec)) and v


def _parse_bytes(spec, args, cur):
    v = parse_memory(args[0])
    bounds = (">= %d" % spec.lo) if spec.hi == INT64_MAX else "between %d and %d" % (spec.lo, spec.hi)
    return require(spec.lo <= v <= spec.hi, "must be a number of bytes %s, optionally with "
                   "a unit (k, kb, m, mb, g, gb)" % bounds) and v


class Share(NamedTuple):
    """A percentage of ``maxmemory`` (``maxmemory-clients 10%``, as Redis 7)."""
    percent: int


def _parse_share(spec, args, cur):
    """A number of bytes, or a percentage of maxmemory: ``10%``."""
    text = args[0]
    try:
        if not text.endswith("%"):
            return _parse_bytes(spec, args, cur)
        require(re.fullmatch("[0-9]{1,3}%", text) and int(text[:-1]) <= 100, "")
        return Share(int(text[:-1]))
    except InvalidValue:
        raise InvalidValue("must be a number of bytes >= 0, optionally with a unit (k, kb, m, mb, g, gb), "
                           "or a percentage of maxmemory (0%..100%)") from None


def _show_share(v):
    return "%d%%" % v.percent if isinstance(v, Share) else str(v)


CLIENT_CLASSES = ("normal",)


def _parse_output_limit(spec, args, cur):
    """One ``client-output-buffer-limit`` line, merged into the limits so far."""
    cls, hard, soft, secs = args
    require(cls.lower() in CLIENT_CLASSES and re.fullmatch("[0-9]+", secs), "the class must "
            "be one of %s and the soft seconds an integer >= 0" % ", ".join(CLIENT_CLASSES))
    limits = (parse_memory(hard), parse_memory(soft), int(secs))
    return require(min(limits) >= 0, "limits must not be negative") and {**cur, cls.lower(): limits}


def _one_line(text_of):
    """A dump of one line, written when the value is not the default."""
    return lambda spec, v: [(text_of(v), v != spec.default)]


def yes_no(v):
    return "yes" if v else "no"


def _config_word(text):
    """An address or endpoint as a config word: bare unless it must be quoted."""
    return to_bytes(text) if re.fullmatch(r"[\w.:/%@+-]+", text) else quote(to_bytes(text))


def _acl_rule_word(text):
    """An ACL rule as a config word: bare unless it must be quoted."""
    return to_bytes(text) if re.fullmatch(r"[\w.:/%@+~#<>!*?|-]+", text) else quote(to_bytes(text))


def _dump_output_limits(spec, v):
    return [(("%s %s %s %d" % (c, format_memory(h), format_memory(s), t)).encode(),
             (h, s, t) != spec.default.get(c, (0, 0, 0))) for c, (h, s, t) in v.items()]


KINDS = {
    "int": Kind(1, "<integer>", _parse_int, str, _one_line(lambda v: b"%d" % v)),
    "mem": Kind(1, "<bytes>", _parse_bytes, str, _one_line(lambda v: format_memory(v).encode())),
    "share": Kind(1, "<bytes>|<percent>%", _parse_share, _show_share, _one_line(lambda v: (
        _show_share(v) if isinstance(v, Share) else format_memory(v)).encode())),
    "bool": Kind(1, "yes|no", lambda s, a, c: require(a[0].lower() in ("yes", "no"), "must be "
                 "'yes' or 'no'") and a[0].lower() == "yes", yes_no, _one_line(lambda v: yes_no(v).encode())),
    "enum": Kind(1, "<choice>", lambda s, a, c: require(a[0].lower() in s.choices, "must be one "
                 "of " + ", ".join(s.choices)) and a[0].lower(), str, _one_line(str.encode)),
    "str": Kind(1, "<string>", lambda s, a, c: (not s.check or s.check(a[0])) and a[0], str,
                lambda s, v: [] if s.nullable and not v else [(quote(to_bytes(v)), v != s.default)]),
    "octal": Kind(1, "<octal mode>", lambda s, a, c: require(re.fullmatch("0*[0-7]{1,3}", a[0]),
                  "must be an octal mode between 0 and 777") and int(a[0], 8),
                  lambda v: "%o" % v, _one_line(lambda v: b"%o" % v)),
    "list": Kind(-1, "<address> [<address> ...]", lambda s, a, c: require(len(a) <= 16, "at most "
                 "16 addresses are allowed") and all(map(s.check or bool, a)) and list(a), " ".join,
                 lambda s, v: [(b" ".join(map(_config_word, v)), v != s.default)] if v else []),
    # client-output-buffer-limit: one class's hard, soft and seconds limits.
    "obl": Kind(4, "<class> <hard limit> <soft limit> <soft seconds>", _parse_output_limit,
                lambda v: " ".join("%s %d %d %d" % (c, *lim) for c, lim in v.items()), _dump_output_limits),
    "pairs": Kind(2, "<command> <new name>", lambda s, a, c: c + [tuple(a)], repr,
                  lambda s, v: []),
    # ACL users: one "user <name> <rule>..." line each, checked with the ACL's
    # rules (check_users_with).
    "users": Kind(-1, "<name> [<rule> ...]", lambda s, a, c: _check_user_line(a) and c + [list(a)], repr,
                  lambda s, v: [(b" ".join(map(_acl_rule_word, words)), True) for words in v]),
    # Twisted endpoint strings, parsed when the node is built (no twisted here).
    "endpoints": Kind(-1, "<endpoint> [<endpoint> ...]", lambda s, a, c: require(len(a) <= 16, "at most "
                      "16 endpoints are allowed") and list(a), " ".join,
                      lambda s, v: [(b" ".join(map(_config_word, v)), v != s.default)] if v else []),
}


#: The check of a ``user`` line's words; see :func:`check_users_with`.
_user_check = None


def check_users_with(check) -> None:
    """Check every ``user`` line from now on (the file's, the command
    line's) with ``check(words)``, which raises InvalidValue saying what is
    wrong with the name or a rule.  The rules are the ACL's, above this
    package: :mod:`disque.access.acl_file` registers its check when it is
    imported, which importing the node service or ``twistd disque``'s
    options does.  A config read with no check registered takes the lines
    as they are, and the node refuses a bad one when it starts."""
    global _user_check
    _user_check = check


def _check_user_line(words):
    if _user_check is not None:
        _user_check(words)
    return True


def parse_set(spec, text, cur):
    """CONFIG SET's value for ``spec`` when it has no ``runtime`` parser of its own."""
    if spec.kind in ("int", "mem") and text.startswith("-"):
        raise InvalidValue("negative")                    # CONFIG SET refuses all negatives
    return KINDS[spec.kind].parse(spec, [text], cur)
