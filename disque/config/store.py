"""Configuration of a Disque node: the Redis-style ``disque.conf`` file, the
command-line overrides, and the state behind CONFIG GET / SET / REWRITE.

Each directive is one row of ``SPECS``; its *kind* (``KINDS``) decides how
arguments parse, how CONFIG GET renders the value (byte for byte as Disque
1.0-rc1) and how CONFIG REWRITE writes it.  Values are native Python objects.
Invariants: a stored value always passed validation, and whatever rewrite()
writes parses back to the same value -- so CONFIG SET is never laxer than the
file (maxmemory, cluster-node-timeout >= 1).  Unlike the original, numbers must
be well-formed, ``include`` is relative to the including file, and ``dir`` is
checked but not chdir()ed to (GET shows it absolute).  No twisted imports.

Every directive does what it says or is refused.  A directive the node does
not implement is *fixed* (``Spec.fixed`` says why): its default, the
original's, is the only value accepted in the file or on the command line,
CONFIG SET refuses it, and CONFIG GET still lists that value where the
original lists the directive (clients and the golden replies see the
original's shape, and the value shown is the one in effect).  docs/config.md
lists every directive and what it does; tests/test_directives.py proves each
one has an effect.

How a running node follows its config -- the one way a change takes effect:
:meth:`Config.set` stores the value, then calls the *appliers* registered for
that directive with :meth:`Config.on_change`.  A component that keeps state
derived from a directive (a copy in the core, a timer, a log filter, an open
file) registers an applier; ``on_change`` also calls it at once with the
current value, so start-up and CONFIG SET go through the same code.  An
applier may refuse a value by raising :class:`ConfigSetError`: the old value
is restored (and given back to the appliers that already took the new one)
and CONFIG SET replies with the error.  A component that keeps no such state
simply reads ``config[name]`` when it needs the value (``requirepass`` at
each command, ``maxclients`` at each connection): it is never stale, so it
needs no applier.  Nothing polls the config.
"""

import contextlib
import errno
import gc
import os
import re
import stat
import tempfile
from dataclasses import dataclass
from typing import Callable, NamedTuple

__all__ = ["Config", "ConfigError", "ConfigSetError", "SPECS", "split_args", "quote",
           "parse_memory", "format_memory", "stringmatch", "SECRETS", "is_secret"]


class ConfigError(Exception):
    """A bad config file or override, explained in one paragraph for the user at
    start-up: file, line number, what is wrong, and the offending line, e.g.
    "disque.conf:12: unknown directive 'fooo' (>>> fooo bar)"."""


class ConfigSetError(Exception):
    """args[0] is the exact error line body (bytes) for a CONFIG SET/GET/REWRITE
    reply, e.g. b"Unsupported CONFIG parameter: port"."""


class _Bad(ValueError):
    """A value failed validation; args[0] says what it must be."""


class _Problem(Exception):
    """A directive could not be applied; str() is the message without location."""


# -- lexical helpers: Redis argument splitting, quoting, memory units, globs --

_BLANK = b" \t\n\r\v\f"
_ENDS_WORD = b" \t\n\r"
_HEX = b"0123456789abcdefABCDEF"
_UNESCAPE = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
_ESCAPE = {10: b"\\n", 13: b"\\r", 9: b"\\t", 7: b"\\a", 8: b"\\b", 92: b"\\\\", 34: b'\\"'}


def split_args(line: bytes) -> "list[bytes] | None":
    """Split one line like Redis' sdssplitargs: "double quotes" with \\xHH \\n \\r
    \\t \\b \\a escapes, 'single quotes' with \\' only.  None on bad quoting."""
    args, i, n = [], 0, len(line)
    while True:
        while i < n and line[i] in _BLANK:
            i += 1
        if i >= n:
            return args
        cur, quote_char = bytearray(), 0
        while True:
            c = line[i] if i < n else None
            if quote_char and c is None:
                return None                               # unterminated quotes
            if quote_char == 34 and c == 92 and i + 3 < n and line[i + 1] == 120 \
                    and line[i + 2] in _HEX and line[i + 3] in _HEX:
                cur.append(int(line[i + 2:i + 4], 16))
                i += 3
            elif quote_char == 34 and c == 92 and i + 1 < n:
                i += 1
                cur.append(_UNESCAPE.get(line[i], line[i]))
            elif quote_char == 39 and c == 92 and i + 1 < n and line[i + 1] == 39:
                i += 1
                cur.append(39)
            elif quote_char and c == quote_char:
                if i + 1 < n and line[i + 1] not in _BLANK:
                    return None                           # closing quote must end the word
                i += 1
                break
            elif not quote_char and (c is None or c in _ENDS_WORD):
                break
            elif not quote_char and c in (34, 39):
                quote_char = c
            else:
                cur.append(c)
            i += 1
        args.append(bytes(cur))


def quote(data: bytes) -> bytes:
    """Double-quoted form that split_args() reads back unchanged (sdscatrepr)."""
    out = bytearray(b'"')
    for c in data:
        out += _ESCAPE.get(c) or (bytes((c,)) if 32 <= c < 127 else b"\\x%02x" % c)
    return bytes(out + b'"')


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000 ** 2, "mb": 1024 ** 2,
          "g": 1000 ** 3, "gb": 1024 ** 3}
_MEMORY = re.compile(r"(-?[0-9]+)([A-Za-z]*)")
_INT = re.compile(r"-?[0-9]+")
_I32, _I64 = 2 ** 31 - 1, 2 ** 63 - 1


def parse_memory(text: str) -> int:
    """'1k' = 1000, '1kb' = 1024, m/mb, g/gb, case-insensitive; plain bytes otherwise."""
    m = _MEMORY.fullmatch(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise _Bad("must be a number of bytes, optionally with a unit (k, kb, m, mb, g, gb)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def format_memory(n: int) -> str:
    """The shortest exact form using gb/mb/kb (as CONFIG REWRITE writes sizes)."""
    for unit in ("gb", "mb", "kb"):
        if n and n % _UNITS[unit] == 0:
            return "%d%s" % (n // _UNITS[unit], unit)
    return str(n)


def stringmatch(pattern: bytes, string: bytes) -> bool:
    """Redis glob matching (case-sensitive): * ? [abc] [^a] [a-z] and \\ escapes."""
    p, i, plen, slen = 0, 0, len(pattern), len(string)
    while p < plen and i < slen:
        c = pattern[p]
        if c == 42:                                       # '*'
            while p + 1 < plen and pattern[p + 1] == 42:
                p += 1
            if p + 1 == plen:
                return True
            return any(stringmatch(pattern[p + 1:], string[k:]) for k in range(i, slen))
        if c == 91:                                       # '['
            p += 1
            negate = p < plen and pattern[p] == 94
            p += negate
            hit = False
            while True:
                if p + 1 < plen and pattern[p] == 92:
                    p += 1
                    hit |= pattern[p] == string[i]
                elif p < plen and pattern[p] == 93:
                    break
                elif p >= plen:                           # unterminated: ends the pattern
                    p -= 1
                    break
                elif p + 2 < plen and pattern[p + 1] == 45:
                    lo, hi = sorted((pattern[p], pattern[p + 2]))
                    hit |= lo <= string[i] <= hi
                    p += 2
                else:
                    hit |= pattern[p] == string[i]
                p += 1
            if hit == negate:
                return False
        elif c != 63:                                     # not '?': literal, maybe escaped
            if c == 92 and p + 1 < plen:
                p += 1
            if pattern[p] != string[i]:
                return False
        p += 1
        i += 1
        if i == slen:
            while p < plen and pattern[p] == 42:
                p += 1
    return p == plen and i == slen


def _dec(data: bytes) -> str:
    return data.decode("utf-8", "surrogateescape")


def _enc(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


# -- kinds: parse (file and overrides), render for GET, dump for REWRITE --

@dataclass(frozen=True, eq=False)          # eq=False: hashable by identity
class Spec:
    name: str
    kind: str
    default: object
    settable: bool = False                 # CONFIG SET accepts it
    lo: int = -2 ** 63
    hi: int = _I64
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
    nargs: int                             # exact count; -1 means one or more
    usage: str
    parse: Callable                        # (spec, args, current) -> value, raises _Bad
    show: Callable                         # value -> str
    dump: Callable                         # (spec, value) -> [(bytes, force)]


def _int_text(spec):
    if spec.clamp:
        return "must be an integer (values outside %d..%d are clamped)" % (spec.lo, spec.hi)
    if spec.hi != _I64:
        return "must be an integer between %d and %d" % (spec.lo, spec.hi)
    return "must be an integer" + (" >= %d" % spec.lo if spec.lo > -2 ** 63 else "")


def _need(ok, message) -> bool:
    """True, or raise _Bad(message): lets simple parsers be one expression."""
    if not ok:
        raise _Bad(message)
    return True


def _p_int(spec, args, cur):
    _need(_INT.fullmatch(args[0]), _int_text(spec))
    v = int(args[0])
    return min(max(v, spec.lo), spec.hi) if spec.clamp else \
        _need(spec.lo <= v <= spec.hi, _int_text(spec)) and v


def _p_mem(spec, args, cur):
    v = parse_memory(args[0])
    bounds = (">= %d" % spec.lo) if spec.hi == _I64 else "between %d and %d" % (spec.lo, spec.hi)
    return _need(spec.lo <= v <= spec.hi, "must be a number of bytes %s, optionally with "
                 "a unit (k, kb, m, mb, g, gb)" % bounds) and v


class Share(NamedTuple):
    """A percentage of ``maxmemory`` (``maxmemory-clients 10%``, as Redis 7)."""
    percent: int


def _p_share(spec, args, cur):
    """A number of bytes, or a percentage of maxmemory: ``10%``."""
    text = args[0]
    try:
        if not text.endswith("%"):
            return _p_mem(spec, args, cur)
        _need(re.fullmatch("[0-9]{1,3}%", text) and int(text[:-1]) <= 100, "")
        return Share(int(text[:-1]))
    except _Bad:
        raise _Bad("must be a number of bytes >= 0, optionally with a unit (k, kb, m, mb, g, gb), "
                   "or a percentage of maxmemory (0%..100%)") from None


def _show_share(v):
    return "%d%%" % v.percent if isinstance(v, Share) else str(v)


_CLIENT_CLASSES = ("normal",)


def _p_obl(spec, args, cur):
    cls, hard, soft, secs = args
    _need(cls.lower() in _CLIENT_CLASSES and re.fullmatch("[0-9]+", secs), "the class must "
          "be one of %s and the soft seconds an integer >= 0" % ", ".join(_CLIENT_CLASSES))
    limits = (parse_memory(hard), parse_memory(soft), int(secs))
    return _need(min(limits) >= 0, "limits must not be negative") and {**cur, cls.lower(): limits}


def _one(text_of):
    return lambda spec, v: [(text_of(v), v != spec.default)]


def _yesno(v):
    return "yes" if v else "no"


def _safe_word(text):
    return _enc(text) if re.fullmatch(r"[\w.:/%@+-]+", text) else quote(_enc(text))


def _rule_word(text):
    """An ACL rule as a config word: bare unless it must be quoted."""
    return _enc(text) if re.fullmatch(r"[\w.:/%@+~#<>!*?|-]+", text) else quote(_enc(text))


def _dump_obl(spec, v):
    return [(("%s %s %s %d" % (c, format_memory(h), format_memory(s), t)).encode(),
             (h, s, t) != spec.default.get(c, (0, 0, 0))) for c, (h, s, t) in v.items()]


KINDS = {
    "int": Kind(1, "<integer>", _p_int, str, _one(lambda v: b"%d" % v)),
    "mem": Kind(1, "<bytes>", _p_mem, str, _one(lambda v: format_memory(v).encode())),
    "share": Kind(1, "<bytes>|<percent>%", _p_share, _show_share, _one(lambda v: (
        _show_share(v) if isinstance(v, Share) else format_memory(v)).encode())),
    "bool": Kind(1, "yes|no", lambda s, a, c: _need(a[0].lower() in ("yes", "no"), "must be "
                 "'yes' or 'no'") and a[0].lower() == "yes", _yesno, _one(lambda v: _yesno(v).encode())),
    "enum": Kind(1, "<choice>", lambda s, a, c: _need(a[0].lower() in s.choices, "must be one "
                 "of " + ", ".join(s.choices)) and a[0].lower(), str, _one(str.encode)),
    "str": Kind(1, "<string>", lambda s, a, c: (not s.check or s.check(a[0])) and a[0], str,
                lambda s, v: [] if s.nullable and not v else [(quote(_enc(v)), v != s.default)]),
    "octal": Kind(1, "<octal mode>", lambda s, a, c: _need(re.fullmatch("0*[0-7]{1,3}", a[0]),
                  "must be an octal mode between 0 and 777") and int(a[0], 8),
                  lambda v: "%o" % v, _one(lambda v: b"%o" % v)),
    "list": Kind(-1, "<address> [<address> ...]", lambda s, a, c: _need(len(a) <= 16, "at most "
                 "16 addresses are allowed") and all(map(s.check or bool, a)) and list(a), " ".join,
                 lambda s, v: [(b" ".join(map(_safe_word, v)), v != s.default)] if v else []),
    "obl": Kind(4, "<class> <hard limit> <soft limit> <soft seconds>", _p_obl,
                lambda v: " ".join("%s %d %d %d" % (c, *lim) for c, lim in v.items()), _dump_obl),
    "pairs": Kind(2, "<command> <new name>", lambda s, a, c: c + [tuple(a)], repr,
                  lambda s, v: []),
    # ACL users (disque/acl.py): one "user <name> <rule>..." line each.
    "users": Kind(-1, "<name> [<rule> ...]", lambda s, a, c: _check_user(a) and c + [list(a)], repr,
                  lambda s, v: [(b" ".join(map(_rule_word, words)), True) for words in v]),
    # Twisted endpoint strings, parsed when the node is built (no twisted here).
    "endpoints": Kind(-1, "<endpoint> [<endpoint> ...]", lambda s, a, c: _need(len(a) <= 16, "at most "
                      "16 endpoints are allowed") and list(a), " ".join,
                      lambda s, v: [(b" ".join(map(_safe_word, v)), v != s.default)] if v else []),
}


# -- extra checks, and run-time (CONFIG SET) parsers that differ from the file's --

def _check_user(words):
    """A ``user`` line's name and rules must parse (disque.acl)."""
    from ..acl import AclError, parse_lines

    try:
        parse_lines([(0, [b"user"] + [_enc(w) for w in words])])
    except AclError as e:
        raise _Bad(str(e)) from None
    return True


def _dir_error(path):
    try:
        if not stat.S_ISDIR(os.stat(path).st_mode):
            return os.strerror(errno.ENOTDIR)
    except (OSError, ValueError) as e:
        return getattr(e, "strerror", None) or str(e)
    return None


def _check_logfile(path):
    """The file must be writable, or creatable in an existing directory (the
    original opens it for appending; this checks without creating it)."""
    if path:
        parent = os.path.dirname(os.path.abspath(path))
        problem = os.strerror(errno.EISDIR) if os.path.isdir(path) else _dir_error(parent)
        if not problem and not os.access(path if os.path.exists(path) else parent, os.W_OK):
            problem = os.strerror(errno.EACCES)
        _need(not problem, "can't open the log file: %s" % problem)
    return True


def _set_generic(spec, text, cur):
    if spec.kind in ("int", "mem") and text.startswith("-"):
        raise _Bad("negative")                            # CONFIG SET refuses all negatives
    return KINDS[spec.kind].parse(spec, [text], cur)


def _set_obl(spec, text, cur):
    words = text.split(" ") if text else []
    if len(words) % 4:
        raise _Bad("need <class> <hard> <soft> <seconds> groups")
    new = dict(cur)
    for k in range(0, len(words), 4):
        cls, nums = words[k].lower(), words[k + 1:k + 4]
        if cls not in _CLIENT_CLASSES or not all(re.fullmatch("[0-9]+", w) for w in nums):
            raise _Bad("bad group")
        new[cls] = tuple(int(w) for w in nums)
    return new


def _set_words(spec, text, cur):
    """CONFIG SET of a list directive: its words, space separated."""
    return KINDS[spec.kind].parse(spec, text.split(), cur)


def _check_host_name(text):
    """An ``http-allowed-hosts`` word: ``*`` or a host name as a Host
    header carries it, without the port."""
    return _need(text == "*" or re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", text),
                 "'%s' is not a host name: letters, digits, '.', '-', '_' and no port (or * for any)" % text)


def _set_keepalive(spec, text, cur):
    """CONFIG SET tcp-keepalive takes yes/no, as the original (whose CONFIG GET
    shows yes/no): yes keeps the interval set in the file, or 300 s."""
    on = KINDS["bool"].parse(spec, [text], cur)
    return (cur or 300) if on else 0


#: tls-protocols words (case-insensitive), oldest first; "" means the default.
TLS_PROTOCOLS = ("tlsv1", "tlsv1.1", "tlsv1.2", "tlsv1.3")
TLS_DEFAULT_PROTOCOLS = "TLSv1.2 TLSv1.3"


def tls_protocol_range(text):
    """``(lowest, highest)``: indexes in TLS_PROTOCOLS of the versions
    ``tls-protocols`` names (as Redis: case-insensitive, space separated).
    They must be consecutive: OpenSSL takes a minimum and a maximum."""
    words = [w.lower() for w in (text or TLS_DEFAULT_PROTOCOLS).split()]
    unknown = [w for w in words if w not in TLS_PROTOCOLS]
    _need(words and not unknown, "versions are TLSv1, TLSv1.1, TLSv1.2 and TLSv1.3")
    indexes = sorted({TLS_PROTOCOLS.index(w) for w in words})
    _need(indexes == list(range(indexes[0], indexes[-1] + 1)), "the versions must be consecutive")
    return indexes[0], indexes[-1]


_GC_FREEZE = hasattr(gc, "freeze")  # CPython's (disque/heap.py); PyPy has none
_TCP_ONLY = "this node listens on TCP only"
_S = Spec
# In CONFIG GET order of the original server; then the project's own; then the
# directives the original reads from the file but does not list in CONFIG GET.
SPECS = (
    _S("requirepass", "str", "", True, nullable=True,
       check=lambda t: _need(len(_enc(t)) <= 512, "must be at most 512 bytes long")),
    _S("unixsocket", "str", "", nullable=True, fixed=_TCP_ONLY),
    _S("logfile", "str", "", check=_check_logfile),
    _S("pidfile", "str", "/var/run/disque.pid",
       fixed="twistd writes the pid file: use twistd --pidfile <path>"),
    _S("maxmemory", "mem", 1024 ** 3, True, lo=1),
    _S("maxmemory-samples", "int", 5, lo=1, hi=_I32,
       fixed="eviction does not sample: it frees what no guarantee needs, oldest first"),
    _S("timeout", "int", 0, True, lo=0, hi=_I32),
    _S("auto-aof-rewrite-percentage", "int", 100, True, lo=0, hi=_I32),
    _S("auto-aof-rewrite-min-size", "mem", 64 * 1024 ** 2, True, lo=0),
    _S("slowlog-log-slower-than", "int", 10000, True),
    _S("latency-monitor-threshold", "int", 0, True, lo=0),
    _S("slowlog-max-len", "int", 128, True, lo=0, hi=2 ** 32 - 1),
    _S("port", "int", 7711, lo=0, hi=65535),
    _S("tcp-backlog", "int", 511, lo=0, hi=_I32),
    _S("databases", "int", 16, lo=1, hi=_I32, fixed="Disque has no databases"),
    _S("maxclients", "int", 10000, True, lo=1, hi=_I32),
    _S("watchdog-period", "int", 0, True, lo=0),
    _S("hz", "int", 10, True, lo=1, hi=500, clamp=True),
    _S("cluster-node-timeout", "int", 15000, True, lo=1),
    _S("tcp-keepalive", "int", 0, True, lo=0, hi=_I32, show=_yesno,     # yes/no, as the original
       runtime=_set_keepalive),
    _S("no-appendfsync-on-rewrite", "bool", False, True),
    _S("daemonize", "bool", False,
       fixed="twistd runs the node in the background unless given -n"),
    _S("activerehashing", "bool", True,
       fixed="the node's hash tables (Python dicts) resize at once: there is no rehashing to do"),
    _S("aof-rewrite-incremental-fsync", "bool", True, True),
    _S("aof-load-truncated", "bool", True, True),
    _S("aof-enqueue-jobs-once", "bool", False, True),
    _S("maxmemory-policy", "enum", "acks", True, choices=("acks", "noeviction")),
    _S("loglevel", "enum", "notice", True, choices=("debug", "verbose", "notice", "warning")),
    _S("appendfsync", "enum", "everysec", True, choices=("everysec", "always", "no")),
    _S("syslog-facility", "enum", "local0",
       choices=("user",) + tuple("local%d" % n for n in range(8))),
    _S("appendonly", "bool", False, True),
    _S("dir", "str", ".", show=os.path.abspath, check=lambda t: _need(
        not _dir_error(t), "can't use it as working directory: %s" % _dir_error(t))),
    _S("client-output-buffer-limit", "obl", {"normal": (0, 0, 0)}, True, runtime=_set_obl),
    _S("unixsocketperm", "octal", 0, fixed=_TCP_ONLY),
    _S("bind", "list", ["127.0.0.1"]),
    _S("federation-policy", "str", "default", original=False,
       check=lambda t: _need(t, "must not be empty")),
    _S("persistence", "str", "aof", original=False,
       check=lambda t: _need(t, "must not be empty")),
    _S("listen", "endpoints", [], original=False),
    _S("cluster-listen", "endpoints", [], original=False),
    _S("cluster-connect", "str", "", original=False, nullable=True),
    _S("gc-freeze-interval", "int", 1 if _GC_FREEZE else 0, original=False, lo=0, hi=86400,
       fixed="" if _GC_FREEZE else "this runtime's collector has no gc.freeze and needs none "
       "(PyPy's major collections are incremental)"),
    _S("dedup-window", "int", 600, True, original=False, lo=0, hi=30 * 86400),
    _S("max-deliveries", "int", 0, True, original=False, lo=0, hi=(1 << 32) - 1),
    _S("output-flush", "enum", "read", True, original=False, choices=("read", "turn")),
    # What a load does with damaged AOF records (disque.persistence.records):
    # refuse to start, or start without them (their jobs come back from the
    # nodes holding copies).
    _S("aof-load-damaged", "enum", "refuse", True, original=False, choices=("refuse", "skip")),
    # Who may connect and run DEBUG (disque/protection.py, docs/security.md),
    # as Redis 7: protected mode, and DEBUG from local connections only.
    _S("protected-mode", "bool", True, True, original=False),
    _S("enable-debug-command", "enum", "local", original=False, choices=("no", "local", "yes")),
    # Users and their permissions (disque/acl.py, docs/security.md): "user"
    # lines or an aclfile (relative to dir), never both.
    _S("user", "users", [], get=False, original=False),
    _S("aclfile", "str", "", original=False, nullable=True),
    _S("acllog-max-len", "int", 128, True, original=False, lo=0, hi=_I32),
    _S("cluster-password", "str", "", True, original=False, nullable=True,
       check=lambda t: _need(len(_enc(t)) <= 512, "must be at most 512 bytes long")),
    # A bus reachable beyond loopback needs cluster-password or tls-cluster,
    # unless this says anyone who can reach it may be a member
    # (disque.listeners.open_bus_refusal, docs/security.md).
    _S("cluster-trusted-network", "bool", False, original=False),
    # TLS (disque/tls.py, docs/security.md), in Redis' words; CONFIG SET of
    # the settable ones reloads the certificates for new connections.
    # The HTTP side (disque/http/, docs/observability.md): off while
    # http-port is 0; http-frontend names the strategy serving it.
    _S("http-port", "int", 0, original=False, lo=0, hi=65535),
    _S("http-bind", "str", "127.0.0.1", original=False),
    _S("http-frontend", "str", "default", original=False, check=lambda t: _need(t, "must not be empty")),
    _S("http-tls", "bool", False, original=False),
    # Host header names the HTTP side answers to besides localhost, IP
    # addresses and http-bind (disque/http/access.py); "*": any.
    _S("http-allowed-hosts", "list", [], True, original=False, check=_check_host_name, runtime=_set_words),
    _S("metrics-max-queues", "int", 50, True, original=False, lo=0, hi=100000),
    _S("tls-port", "int", 0, original=False, lo=0, hi=65535),
    _S("tls-cert-file", "str", "", True, original=False, nullable=True),
    _S("tls-key-file", "str", "", True, original=False, nullable=True),
    _S("tls-ca-cert-file", "str", "", True, original=False, nullable=True),
    _S("tls-ca-cert-dir", "str", "", True, original=False, nullable=True),
    _S("tls-auth-clients", "enum", "yes", True, original=False, choices=("yes", "no", "optional")),
    # A TLS client certificate's CN names the user the client runs as
    # (Redis 8's directive; "cn" or "off").
    _S("tls-auth-clients-user", "enum", "off", True, original=False, choices=("off", "cn")),
    _S("tls-cluster", "bool", False, original=False),
    _S("tls-protocols", "str", "", True, original=False, nullable=True,
       check=lambda t: tls_protocol_range(t) and True),
    _S("tls-ciphers", "str", "", True, original=False, nullable=True),
    _S("tls-ciphersuites", "str", "", True, original=False, nullable=True),
    # Limits of later Redis versions (docs/limits.md): the query buffer and
    # bulk limits of Redis 4, the bus send buffer limit of Redis 7.  A bulk
    # must fit a bus frame (disque.bus.protocol.MAX_FRAME): 512 MB at most.
    _S("client-query-buffer-limit", "mem", 1024 ** 3, True, original=False, lo=1024 ** 2),
    # Redis 7: what all clients together may hold (disque/client_memory.py).
    _S("maxmemory-clients", "share", 0, True, original=False, lo=0),
    _S("proto-max-bulk-len", "mem", 512 * 1024 ** 2, True, original=False, lo=1024 ** 2,
       hi=512 * 1024 ** 2),
    _S("cluster-link-sendbuf-limit", "mem", 256 * 1024 ** 2, True, original=False, lo=0),
    _S("syslog-enabled", "bool", False, get=False),
    _S("syslog-ident", "str", "disque", get=False),
    _S("appendfilename", "str", "disque.aof", get=False,
       check=lambda t: _need("/" not in t and "\\" not in t, "must be a file name, not a path")),
    _S("cluster-config-file", "str", "nodes.conf", get=False),
    _S("rename-command", "pairs", [], get=False, rewrite=False),
)
_BY_NAME = {s.name: s for s in SPECS}
#: Directives whose values are secrets: MONITOR, the slow log and the audit
#: lines never show them (disque.commands.redact).  Every directive whose
#: name says "pass" must be here (tests/test_access.py checks).
SECRETS = frozenset(("requirepass", "cluster-password"))


def is_secret(name: bytes) -> bool:
    """Whether the directive ``name`` (any case) holds a secret."""
    return _dec(name.lower()) in SECRETS

_SIGNATURE = b"# Generated by CONFIG REWRITE"
_MAX_INCLUDE_DEPTH = 16


def _copy(v):
    return v.copy() if isinstance(v, (list, dict)) else v


class Config:
    """The configuration of one node; see the module docstring."""

    def __init__(self):
        self.path: "str | None" = None
        self._values = {s.name: _copy(s.default) for s in SPECS}
        self._appliers: "dict[str, list]" = {}

    @classmethod
    def defaults(cls) -> "Config":
        return cls()

    @classmethod
    def from_file(cls, path: str) -> "Config":
        config = cls()
        config._load(path, 0)
        config.path = os.path.abspath(path)       # still valid if the process chdir()s
        return config

    def __getitem__(self, name: str):
        return _copy(self._values[name])

    def changed_from_default(self) -> "dict[str, object]":
        return {s.name: self[s.name] for s in SPECS if self._values[s.name] != s.default}

    def on_change(self, name: str, apply) -> "Callable[[], None]":
        """Register ``apply(value)`` for directive ``name`` and call it now with
        the current value; it is called again after each CONFIG SET of
        ``name``.  It may refuse a value by raising ConfigSetError (at
        registration that is a ConfigError: start-up stops).  Returns a
        function that unregisters it (a stopped service lets go)."""
        name = name.lower()
        if name not in _BY_NAME:
            raise KeyError(name)
        try:
            apply(self[name])
        except ConfigSetError as e:
            raise ConfigError("%s: %s" % (name, _dec(e.args[0]))) from None
        appliers = self._appliers.setdefault(name, [])
        appliers.append(apply)

        def forget():
            if apply in appliers:
                appliers.remove(apply)
        return forget

    # -- loading --

    def _load(self, path, depth):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            problem = "can't open config file '%s': %s" % (path, e.strerror or e)
            if depth:
                raise _Problem(problem) from None          # reported at the include line
            raise ConfigError(problem) from None
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            line = raw.strip(b" \t\r\n")
            if not line or line.startswith(b"#"):
                continue
            args = split_args(line)
            try:
                if args is None:
                    raise _Problem("unbalanced quotes")
                if args:
                    self._apply(_dec(args[0]).lower(), [_dec(a) for a in args[1:]], path, depth)
            except _Problem as e:
                raise ConfigError("%s:%d: %s (>>> %s)" % (
                    path, lineno, e, line.decode("utf-8", "replace"))) from None

    def _apply(self, name, args, base, depth):
        if name == "include":
            if len(args) != 1:
                raise _Problem("wrong number of arguments for 'include': expected 1 "
                               "(<path>), got %d" % len(args))
            if depth >= _MAX_INCLUDE_DEPTH:
                raise _Problem("includes nested more than %d deep (a loop?)" % _MAX_INCLUDE_DEPTH)
            self._load(os.path.join(os.path.dirname(base or ""), args[0]), depth + 1)
            return
        spec = _BY_NAME.get(name)
        if spec is None:
            raise _Problem("unknown directive '%s'" % name)
        kind = KINDS[spec.kind]
        if len(args) != kind.nargs and not (kind.nargs < 0 and args):
            raise _Problem("wrong number of arguments for '%s': expected %s (%s), got %d" % (
                name, kind.nargs if kind.nargs > 0 else "at least 1", kind.usage, len(args)))
        try:
            value = kind.parse(spec, args, self._values[name])
        except _Bad as e:
            raise _Problem("invalid value '%s' for '%s': %s" % (" ".join(args), name, e)) from None
        if spec.fixed and value != spec.default:
            only = (spec.show or kind.show)(spec.default) or '""'
            raise _Problem("unsupported value '%s' for '%s': %s (only %s is accepted)" % (
                " ".join(args), name, spec.fixed, only))
        self._values[name] = value

    def apply_overrides(self, overrides: "dict[str, str]") -> None:
        """Command-line overrides, validated like file lines.  Directives taking
        several arguments (bind, client-output-buffer-limit, rename-command) are
        split with the file's quoting rules; the others take the value verbatim."""
        for option, value in overrides.items():
            name = option.strip().lower()
            spec = _BY_NAME.get(name)
            try:
                if name == "include" or (spec and KINDS[spec.kind].nargs == 1):
                    args = [value]
                else:
                    words = split_args(_enc(value))
                    if words is None:
                        raise _Problem("unbalanced quotes in '%s'" % value)
                    args = [_dec(w) for w in words]
                self._apply(name, args, None, 0)
            except _Problem as e:
                raise ConfigError("command-line option '%s': %s" % (option, e)) from None

    def store(self, name: str, value) -> None:
        """Store the value of a directive whose state another component
        owns and keeps (the ``user`` lines, from the ACL), so CONFIG
        REWRITE writes it; no applier is called."""
        self._values[name] = _copy(value)

    # -- CONFIG GET / SET --

    def get_all(self, pattern: bytes) -> "list[tuple[bytes, bytes]]":
        """CONFIG GET.  Project parameters answer only to their exact name,
        so glob replies (``CONFIG GET *``) stay those of the original."""
        out = []
        for spec in SPECS:
            if not spec.original and pattern != spec.name.encode():
                continue
            if spec.get and stringmatch(pattern, spec.name.encode()):
                shown = (spec.show or KINDS[spec.kind].show)(self._values[spec.name])
                out.append((spec.name.encode(), _enc(shown)))
        return out

    def set(self, name: bytes, value: bytes) -> None:
        key = _dec(name.lower())
        spec = _BY_NAME.get(key)
        if spec is None or not spec.settable:
            raise ConfigSetError(b"Unsupported CONFIG parameter: " + name)
        try:
            new = (spec.runtime or _set_generic)(spec, _dec(value), self._values[key])
        except _Bad:
            raise ConfigSetError(b"Invalid argument '" + value + b"' for CONFIG SET '"
                                 + name + b"'") from None
        old = self._values[key]
        self._values[key] = new
        done = []
        try:
            for apply in list(self._appliers.get(key, ())):
                apply(_copy(new))
                done.append(apply)
        except ConfigSetError:
            self._values[key] = old                       # refused: as if never set
            for apply in done:
                apply(_copy(old))
            raise

    # -- CONFIG REWRITE --

    def rewrite(self) -> None:
        """Rewrite the file in place, Redis style: comments, unknown directives
        and includes stay; each known directive reuses its old lines in order
        (extra duplicates are blanked); non-default values not yet in the file
        are appended after a signature line.  Written atomically."""
        if self.path is None:
            raise ConfigSetError(b"The server is running without a config file")
        try:
            target = os.path.realpath(self.path)
            try:
                with open(target, "rb") as f:
                    old = f.read().split(b"\n")
            except FileNotFoundError:
                old = [b""]
            _write_atomically(target, self._rewritten(old[:-1] if old[-1] == b"" else old))
        except OSError as e:
            raise ConfigSetError(b"Rewriting config file: " + (e.strerror or str(e)).encode()) from None

    def _rewritten(self, old_lines):
        lines, slots, has_tail = [], {}, False
        for raw in old_lines:
            line = raw.strip(b" \t\r\n")
            args = split_args(line) if line and not line.startswith(b"#") else []
            if args is None:
                line = b"# ??? " + line
            elif args:
                slots.setdefault(_dec(args[0].lower()), []).append(len(lines))
            has_tail |= line == _SIGNATURE
            lines.append(line)
        for spec in SPECS:
            if not spec.rewrite:
                continue
            free = slots.setdefault(spec.name, [])
            for text, force in KINDS[spec.kind].dump(spec, self._values[spec.name]):
                new = spec.name.encode() + b" " + text
                if free:
                    lines[free.pop(0)] = new
                elif force:
                    if not has_tail:
                        lines.append(_SIGNATURE)
                        has_tail = True
                    lines.append(new)
            for index in free:                            # duplicates, or now unset
                lines[index] = b""
        return b"".join(line + b"\n" for i, line in enumerate(lines)
                        if line or i == 0 or lines[i - 1])      # runs of blank lines -> one


def _write_atomically(path, content):
    """Temp file in the same directory, fsync, rename: readers see old or new, never half."""
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else 0o644
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
