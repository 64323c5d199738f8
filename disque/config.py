"""disque.conf: Redis-style config files, CONFIG GET / SET / REWRITE.

One data-driven table of directive specs (name, kind, default, settable at
run time).  Files are read line by line, arguments split with the Redis
``sdssplitargs`` rules (shared with the inline protocol parser), names are
case-insensitive.  Values are stored as native Python values; CONFIG GET
renders them as the original does.
"""

import fnmatch
import os
import tempfile

from .resp.codec import ProtocolError
from .resp.codec import _sdssplitargs as split_args


class ConfigError(Exception):
    """A start-up error: names the file, the line and what is wrong."""


class ConfigSetError(Exception):
    """``args[0]``: the error text (bytes) for a CONFIG reply."""


_UNITS = {"": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def parse_memory(text: str) -> int:
    t = text.strip().lower()
    num = t.rstrip("kmgb")
    unit = t[len(num):]
    if unit not in _UNITS or not num or not num.lstrip("-").isdigit():
        raise ValueError("must be a number of bytes, optionally with a unit (k, kb, m, mb, g, gb)")
    return int(num) * _UNITS[unit]


class Spec:
    __slots__ = ("name", "kind", "default", "settable", "lo", "hi", "choices", "shown")

    def __init__(self, name, kind, default, settable=False, lo=None, hi=None, choices=None, shown=True):
        self.name, self.kind, self.default, self.settable = name, kind, default, settable
        self.lo, self.hi, self.choices, self.shown = lo, hi, choices, shown

    def parse(self, args):
        """Native value from the directive's arguments (strings)."""
        kind = self.kind
        if kind == "list":
            return list(args)
        if kind == "buffer-limit":
            return " ".join(args)
        if len(args) != 1:
            raise ValueError("expects exactly one argument")
        text = args[0]
        if kind == "str":
            return text
        if kind == "bool":
            if text.lower() not in ("yes", "no"):
                raise ValueError("must be 'yes' or 'no'")
            return text.lower() == "yes"
        if kind == "enum":
            if text.lower() not in self.choices:
                raise ValueError("must be one of %s" % ", ".join(self.choices))
            return text.lower()
        if kind == "memory":
            value = parse_memory(text)
        else:  # int
            try:
                value = int(text)
            except ValueError:
                raise ValueError("must be an integer") from None
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise ValueError("must be between %s and %s" % (self.lo, self.hi))
        return value

    def render(self, value) -> bytes:
        if self.kind == "bool":
            return b"yes" if value else b"no"
        if self.kind == "list":
            return " ".join(value).encode()
        return str(value).encode()

    def render_file(self, value) -> str:
        if self.kind == "list":
            return " ".join(_quote(v) for v in value)
        if self.kind == "buffer-limit":
            return value
        return _quote(self.render(value).decode())


def _quote(text: str) -> str:
    if text and all(c.isprintable() and c not in ' "\'\\' for c in text):
        return text
    return '"' + "".join(c if c.isprintable() and c not in '"\\' else "\\x%02x" % ord(c) if ord(c) < 256 and not c.isprintable() else "\\" + c for c in text) + '"'


S = Spec
# CONFIG GET order of the original first (shown=True), then file-only and
# project directives.
SPECS = [
    S("requirepass", "str", "", True),
    S("unixsocket", "str", ""),
    S("logfile", "str", ""),
    S("pidfile", "str", "/var/run/disque.pid"),
    S("maxmemory", "memory", 1024**3, True, lo=0),
    S("maxmemory-samples", "int", 5, True, lo=1),
    S("timeout", "int", 0, True, lo=0),
    S("auto-aof-rewrite-percentage", "int", 100, True, lo=0),
    S("auto-aof-rewrite-min-size", "memory", 64 * 1024 * 1024, True, lo=0),
    S("slowlog-log-slower-than", "int", 10000, True),
    S("latency-monitor-threshold", "int", 0, True, lo=0),
    S("slowlog-max-len", "int", 128, True, lo=0),
    S("port", "int", 7711, lo=0, hi=65535),
    S("tcp-backlog", "int", 511, lo=0),
    S("databases", "int", 16, lo=1),
    S("maxclients", "int", 10000, True, lo=1),
    S("watchdog-period", "int", 0, True, lo=0),
    S("hz", "int", 10, True, lo=1, hi=500),
    S("cluster-node-timeout", "int", 15000, True, lo=0),
    S("tcp-keepalive", "int", 0, True, lo=0),
    S("no-appendfsync-on-rewrite", "bool", False, True),
    S("daemonize", "bool", False),
    S("activerehashing", "bool", True, True),
    S("aof-rewrite-incremental-fsync", "bool", True, True),
    S("aof-load-truncated", "bool", True, True),
    S("aof-enqueue-jobs-once", "bool", False, True),
    S("maxmemory-policy", "enum", "acks", True, choices=("acks", "noeviction")),
    S("loglevel", "enum", "notice", True, choices=("debug", "verbose", "notice", "warning")),
    S("appendfsync", "enum", "everysec", True, choices=("always", "everysec", "no")),
    S("syslog-facility", "str", "local0"),
    S("appendonly", "bool", False, True),
    S("dir", "str", ".", True),
    S("client-output-buffer-limit", "buffer-limit", "normal 0 0 0", True),
    S("unixsocketperm", "int", 0, lo=0),
    S("bind", "list", ["127.0.0.1"]),
    S("appendfilename", "str", "appendonly.aof", shown=False),
    S("syslog-enabled", "bool", False, shown=False),
    S("syslog-ident", "str", "disque", shown=False),
    S("cluster-config-file", "str", "", shown=False),
    S("federation-policy", "str", "default", True),
    S("persistence", "str", "", False),
]
SPEC_BY_NAME = {s.name: s for s in SPECS}
# CONFIG GET * in the original lists exactly these, in this order, then ours.
_TCP_KEEPALIVE_AS_BOOL = True  # the original renders tcp-keepalive with yes/no


class Config:
    def __init__(self):
        self.values = {s.name: (list(s.default) if isinstance(s.default, list) else s.default) for s in SPECS}
        self.path = None
        self._listeners = {}

    @classmethod
    def defaults(cls):
        return cls()

    @classmethod
    def from_file(cls, path):
        config = cls()
        config.path = os.path.abspath(path)
        config._load(path, set())
        return config

    def _load(self, path, seen):
        real = os.path.realpath(path)
        if real in seen:
            raise ConfigError("%s: include loop" % path)
        seen.add(real)
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
        for lineno, line in enumerate(lines, 1):
            where = "%s:%d" % (path, lineno)
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            try:
                args = [a.decode("utf-8", "surrogateescape") for a in split_args(text.encode("utf-8", "surrogateescape"))]
            except ProtocolError:
                raise ConfigError("%s: unbalanced quotes (>>> %s)" % (where, text)) from None
            name = args[0].lower()
            if name == "include":
                if len(args) != 2:
                    raise ConfigError("%s: include expects one file (>>> %s)" % (where, text))
                self._load(os.path.join(os.path.dirname(path), args[1]), seen)
                continue
            self._assign(name, args[1:], where, text)

    def _assign(self, name, args, where, text=None):
        spec = SPEC_BY_NAME.get(name)
        shown = " (>>> %s)" % text if text else ""
        if spec is None:
            raise ConfigError("%s: unknown directive '%s'%s" % (where, name, shown))
        if not args and spec.kind != "list":
            raise ConfigError("%s: '%s' needs a value%s" % (where, name, shown))
        try:
            self.values[name] = spec.parse(args)
        except ValueError as e:
            raise ConfigError("%s: invalid value '%s' for '%s': %s%s" % (where, " ".join(args), name, e, shown)) from None

    def apply_overrides(self, overrides):
        for name, value in overrides.items():
            key = name.lower().lstrip("-")
            spec = SPEC_BY_NAME.get(key)
            args = value.split() if spec is not None and spec.kind in ("list", "buffer-limit") else [value]
            self._assign(key, args, "option --%s" % key)

    def __getitem__(self, name):
        return self.values[name]

    def add_listener(self, name, callback):
        self._listeners.setdefault(name, []).append(callback)

    # -- CONFIG GET / SET / REWRITE -------------------------------------

    def get_all(self, pattern: bytes):
        pat = pattern.decode("utf-8", "surrogateescape")
        out = []
        for spec in SPECS:
            if spec.shown and fnmatch.fnmatchcase(spec.name, pat):
                value = self.values[spec.name]
                rendered = spec.render(value)
                if spec.name == "tcp-keepalive" and _TCP_KEEPALIVE_AS_BOOL:
                    rendered = b"yes" if value else b"no"
                out.append((spec.name.encode(), rendered))
        return out

    def set(self, name: bytes, value: bytes):
        key = name.decode("utf-8", "replace").lower()
        spec = SPEC_BY_NAME.get(key)
        if spec is None or not spec.settable:
            raise ConfigSetError(b"Unsupported CONFIG parameter: " + name)
        text = value.decode("utf-8", "surrogateescape")
        try:
            args = text.split() if spec.kind in ("list", "buffer-limit") else [text]
            if spec.kind == "buffer-limit" and (len(args) % 4 or not args):
                raise ValueError
            native = spec.parse(args)
        except ValueError:
            raise ConfigSetError(b"Invalid argument '" + value + b"' for CONFIG SET '" + name + b"'") from None
        self.values[key] = native
        for callback in self._listeners.get(key, ()):
            callback(native)

    def changed_from_default(self):
        return {s.name: self.values[s.name] for s in SPECS if self.values[s.name] != s.default}

    def rewrite(self):
        if not self.path:
            raise ConfigSetError(b"The server is running without a config file")
        try:
            with open(self.path, encoding="utf-8", errors="surrogateescape") as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise ConfigSetError(b"Rewriting config file: " + (e.strerror or str(e)).encode())
        out, done = [], set()
        for line in lines:
            text = line.strip()
            name = None
            if text and not text.startswith("#"):
                try:
                    name = split_args(text.encode("utf-8", "surrogateescape"))[0].decode().lower()
                except (ProtocolError, IndexError, UnicodeDecodeError):
                    name = None
            spec = SPEC_BY_NAME.get(name) if name else None
            if spec is None:
                out.append(line)
                continue
            if name in done:
                continue  # duplicates of a rewritten directive go away
            done.add(name)
            out.append("%s %s" % (name, spec.render_file(self.values[name])))
        extra = [s for s in SPECS if s.name not in done and self.values[s.name] != s.default]
        if extra:
            out.append("# Generated by CONFIG REWRITE")
            out.extend("%s %s" % (s.name, s.render_file(self.values[s.name])) for s in extra)
        data = "\n".join(out) + "\n"
        directory = os.path.dirname(self.path) or "."
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=".disque-conf-")
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError as e:
            raise ConfigSetError(b"Rewriting config file: " + (e.strerror or str(e)).encode())
