"""The configuration of one node (:class:`Config`): the values loaded from
the file and the command-line overrides, CONFIG GET / SET / REWRITE, and the
appliers that make a change take effect.

Invariants: a stored value always passed validation, and whatever rewrite()
writes parses back to the same value -- so CONFIG SET is never laxer than the
file (maxmemory, cluster-node-timeout >= 1).  Unlike the original, numbers must
be well-formed, ``include`` is relative to the including file, and ``dir`` is
checked but not chdir()ed to (GET shows it absolute).

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

import os
from typing import Callable

from .errors import ConfigError, ConfigSetError, InvalidValue
from .glob import stringmatch
from .kinds import KINDS, parse_set
from .lexer import split_args, to_bytes, to_text
from .rewrite import rewritten, write_config
from .specs import SPECS, SPECS_BY_NAME

_MAX_INCLUDE_DEPTH = 16


def _copy(v):
    return v.copy() if isinstance(v, (list, dict)) else v


class _DirectiveError(Exception):
    """A directive could not be applied; str() is the message without location."""


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
        if name not in SPECS_BY_NAME:
            raise KeyError(name)
        try:
            apply(self[name])
        except ConfigSetError as e:
            raise ConfigError("%s: %s" % (name, to_text(e.args[0]))) from None
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
                raise _DirectiveError(problem) from None          # reported at the include line
            raise ConfigError(problem) from None
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            line = raw.strip(b" \t\r\n")
            if not line or line.startswith(b"#"):
                continue
            args = split_args(line)
            try:
                if args is None:
                    raise _DirectiveError("unbalanced quotes")
                if args:
                    self._apply(to_text(args[0]).lower(), [to_text(a) for a in args[1:]], path, depth)
            except _DirectiveError as e:
                raise ConfigError("%s:%d: %s (>>> %s)" % (
                    path, lineno, e, line.decode("utf-8", "replace"))) from None

    def _apply(self, name, args, base, depth):
        if name == "include":
            if len(args) != 1:
                raise _DirectiveError("wrong number of arguments for 'include': expected 1 "
                                      "(<path>), got %d" % len(args))
            if depth >= _MAX_INCLUDE_DEPTH:
                raise _DirectiveError("includes nested more than %d deep (a loop?)" % _MAX_INCLUDE_DEPTH)
            self._load(os.path.join(os.path.dirname(base or ""), args[0]), depth + 1)
            return
        spec = SPECS_BY_NAME.get(name)
        if spec is None:
            raise _DirectiveError("unknown directive '%s'" % name)
        kind = KINDS[spec.kind]
        if len(args) != kind.nargs and not (kind.nargs < 0 and args):
            raise _DirectiveError("wrong number of arguments for '%s': expected %s (%s), got %d" % (
                name, kind.nargs if kind.nargs > 0 else "at least 1", kind.usage, len(args)))
        try:
            value = kind.parse(spec, args, self._values[name])
        except InvalidValue as e:
            raise _DirectiveError("invalid value '%s' for '%s': %s" % (" ".join(args), name, e)) from None
        if spec.fixed and value != spec.default:
            only = (spec.show or kind.show)(spec.default) or '""'
            raise _DirectiveError("unsupported value '%s' for '%s': %s (only %s is accepted)" % (
                " ".join(args), name, spec.fixed, only))
        self._values[name] = value

    def apply_overrides(self, overrides: "dict[str, str]") -> None:
        """Command-line overrides, validated like file lines.  Directives taking
        several arguments (bind, client-output-buffer-limit, rename-command) are
        split with the file's quoting rules; the others take the value verbatim."""
        for option, value in overrides.items():
            name = option.strip().lower()
            spec = SPECS_BY_NAME.get(name)
            try:
                if name == "include" or (spec and KINDS[spec.kind].nargs == 1):
                    args = [value]
                else:
                    words = split_args(to_bytes(value))
                    if words is None:
                        raise _DirectiveError("unbalanced quotes in '%s'" % value)
                    args = [to_text(w) for w in words]
                self._apply(name, args, None, 0)
            except _DirectiveError as e:
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
                out.append((spec.name.encode(), to_bytes(shown)))
        return out

    def set(self, name: bytes, value: bytes) -> None:
        key = to_text(name.lower())
        spec = SPECS_BY_NAME.get(key)
        if spec is None or not spec.settable:
            raise ConfigSetError(b"Unsupported CONFIG parameter: " + name)
        try:
            new = (spec.runtime or parse_set)(spec, to_text(value), self._values[key])
        except InvalidValue:
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
            write_config(target, rewritten(old[:-1] if old[-1] == b"" else old, self._values))
        except OSError as e:
            raise ConfigSetError(b"Rewriting config file: " + (e.strerror or str(e)).encode()) from None
