"""The errors of configuration: what the user is told at start-up
(:class:`ConfigError`), what CONFIG SET / GET / REWRITE reply
(:class:`ConfigSetError`), and what a value parser raises when a value fails
validation (:class:`InvalidValue`, turned into one of the other two by the
store).  No imports: every module of the package may use them."""


class ConfigError(Exception):
    """A bad config file or override, explained in one paragraph for the user at
    start-up: file, line number, what is wrong, and the offending line, e.g.
    "disque.conf:12: unknown directive 'fooo' (>>> fooo bar)"."""


class ConfigSetError(Exception):
    """args[0] is the exact error line body (bytes) for a CONFIG SET/GET/REWRITE
    reply, e.g. b"Unsupported CONFIG parameter: port"."""


class InvalidValue(ValueError):
    """A value failed validation; args[0] says what it must be."""


def require(ok, message) -> bool:
    """True, or raise InvalidValue(message): lets simple parsers be one expression."""
    if not ok:
        raise InvalidValue(message)
    return True
