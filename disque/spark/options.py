"""Options of the ``disque`` Spark data source: parsing and validation.

Spark hands a data source its options with lowercased names, so every name
here is matched case-insensitively.  :func:`parse_options` is the only
entry point; it raises :class:`OptionError` (one line naming the problem)
for an unknown option, an option that does not apply to the operation, a
missing queue or a malformed value.  Nothing here touches the network.

Invariants of a parsed :class:`Options`:

* ``nodes`` is a non-empty tuple of ``(host, port)`` seeds, in the order given;
* ``queues`` is a non-empty tuple of distinct queue names (str), unless
  ``queueColumn`` names a per-row queue for a write;
* every number is within the range the server accepts;
* ``backoff`` is None, ``(ms,)`` (FIXED) or ``(base, max)`` with
  ``base <= max`` (EXP);
* a streaming read with ``max_deliveries`` has ``nack_delay_ms`` too, and
  its dead-letter queue (``dead_letter``, or ``<queue>:dead`` for each
  queue) is none of the queues it reads.
"""

from typing import Dict, Optional, Tuple

from ..core.limits import (MAX_BACKOFF_MS, MAX_DELIVERIES, MAX_NACK_DELAY_MS, PRIORITY_MAX,  # noqa: F401 (write.py)
                           PRIORITY_MIN)

DEFAULT_NODES = "127.0.0.1:7711"
DEFAULT_ADDJOB_TIMEOUT_MS = 5000
DEFAULT_MAX_JOBS_PER_TRIGGER = 20000
DEFAULT_WORKING_INTERVAL_S = 5.0

COMMON = ("nodes", "queue", "username", "password")
WRITE = ("replicate", "retry", "ttl", "delay", "async", "timeout",
         "bodycolumn", "queuecolumn", "dedupcolumn", "priority", "prioritycolumn", "backoff",
         "maxdeliveries", "deadletter")
STREAM_READ = ("maxjobspertrigger", "workinginterval", "nackdelayms", "maxdeliveries", "deadletter", "fastack")

# Spelling used in messages (users write camelCase; Spark lowercases it).
_DISPLAY = {"bodycolumn": "bodyColumn", "queuecolumn": "queueColumn", "dedupcolumn": "dedupColumn",
            "maxjobspertrigger": "maxJobsPerTrigger", "workinginterval": "workingInterval",
            "prioritycolumn": "priorityColumn", "maxdeliveries": "maxDeliveries", "deadletter": "deadLetter",
            "nackdelayms": "nackDelayMs", "fastack": "fastAck"}

DEAD_SUFFIX = ":dead"  # the dead-letter queue of <queue> without 'deadLetter' (the nodes' own default)

# Options Spark itself adds to a streaming sink's or source's map.
_SPARK_OWNED = ("checkpointlocation",)

READ, STREAM_READ_MODE, WRITE_MODE = "read", "streaming read", "write"


class OptionError(ValueError):
    """A bad ``disque`` data source option; ``str()`` is the whole message."""


class Options:
    """Validated options (see the module docstring for the invariants)."""

    __slots__ = ("nodes", "queues", "username", "password", "replicate", "retry", "ttl", "delay",
                 "async_", "timeout_ms", "body_column", "queue_column", "dedup_column",
                 "max_jobs_per_trigger", "working_interval", "priority", "priority_column", "backoff",
                 "max_deliveries", "dead_letter", "nack_delay_ms", "fast_ack")

    def __init__(self, **kw):
        for name in self.__slots__:
            setattr(self, name, kw.get(name))

    def __getstate__(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state):
        for name in self.__slots__:
            setattr(self, name, state.get(name))

    def __repr__(self):
        shown = {n: getattr(self, n) for n in self.__slots__ if n != "password"}
        shown["password"] = "***" if self.password else None
        return "Options(%r)" % shown

    def addjob_args(self):
        """The ADDJOB options after ``queue body timeout`` (bytes), the same for every row."""
        out = []
        if self.replicate is not None:
            out += [b"REPLICATE", b"%d" % self.replicate]
        if self.delay is not None:
            out += [b"DELAY", b"%d" % self.delay]
        if self.retry is not None:
            out += [b"RETRY", b"%d" % self.retry]
        if self.ttl is not None:
            out += [b"TTL", b"%d" % self.ttl]
        if self.async_:
            out.append(b"ASYNC")
        if self.backoff is not None:
            if len(self.backoff) == 1:
                out += [b"BACKOFF", b"FIXED", b"%d" % self.backoff[0]]
            else:
                out += [b"BACKOFF", b"EXP", b"%d" % self.backoff[0], b"%d" % self.backoff[1]]
        if self.max_deliveries is not None:
            out += [b"MAXDELIVERIES", b"%d" % self.max_deliveries]
        if self.dead_letter is not None:
            out += [b"DEADLETTER", self.dead_letter.encode()]
        return out

    def dead_letter_queue(self, queue: str) -> str:
        """Where a streaming read moves a job of ``queue`` that has used
        its ``max_deliveries``."""
        return dead_letter_queue(self.dead_letter, queue)


def dead_letter_queue(dead_letter: Optional[str], queue: str) -> str:
    """Where a job of ``queue`` that has used its ``maxDeliveries`` goes:
    the ``deadLetter`` option, else ``<queue>:dead``."""
    return dead_letter or queue + DEAD_SUFFIX


def _name(key):
    return _DISPLAY.get(key, key)


def parse_nodes(text: str) -> Tuple[Tuple[str, int], ...]:
    """``"h1:p1, h2:p2"`` -> ((h1, p1), (h2, p2)); IPv6 as ``[::1]:7711``."""
    out = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host:
            raise OptionError("disque: option 'nodes': %r is not host:port" % item)
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        try:
            p = int(port)
        except ValueError:
            p = -1
        if not 0 < p < 65536:
            raise OptionError("disque: option 'nodes': bad port in %r" % item)
        if (host, p) not in out:
            out.append((host, p))
    if not out:
        raise OptionError("disque: option 'nodes' is empty (expected host:port[,host:port...])")
    return tuple(out)


def _int(opts, key, low, high, default=None):
    if key not in opts:
        return default
    raw = opts[key].strip()
    try:
        value = int(raw)
    except ValueError:
        raise OptionError("disque: option '%s' must be an integer, got %r" % (_name(key), raw)) from None
    if not low <= value <= high:
        raise OptionError("disque: option '%s' must be between %d and %d, got %d" % (_name(key), low, high, value))
    return value


def _float(opts, key, low, default):
    if key not in opts:
        return default
    raw = opts[key].strip()
    try:
        value = float(raw)
    except ValueError:
        raise OptionError("disque: option '%s' must be a number, got %r" % (_name(key), raw)) from None
    if not value >= low:
        raise OptionError("disque: option '%s' must be >= %g, got %r" % (_name(key), low, raw))
    return value


def _bool(opts, key):
    if key not in opts:
        return False
    raw = opts[key].strip().lower()
    if raw in ("true", "1", "yes"):
        return True
    if raw in ("false", "0", "no"):
        return False
    raise OptionError("disque: option '%s' must be true or false, got %r" % (_name(key), opts[key]))


def _backoff(opts) -> Optional[Tuple[int, ...]]:
    """``"500"`` -> (500,) (BACKOFF FIXED); ``"500,60000"`` -> (500, 60000) (EXP)."""
    if "backoff" not in opts:
        return None
    raw = opts["backoff"].strip()
    parts = [p.strip() for p in raw.split(",")]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) not in (1, 2):
        raise OptionError("disque: option 'backoff' must be ms (FIXED) or base-ms,max-ms (EXP), got %r" % raw)
    for v in values:
        if not 1 <= v <= MAX_BACKOFF_MS:
            raise OptionError("disque: option 'backoff' must be between 1 and %d ms, got %d" % (MAX_BACKOFF_MS, v))
    if len(values) == 2 and values[1] < values[0]:
        raise OptionError("disque: option 'backoff': the max (%d ms) is below the base (%d ms)" % (values[1], values[0]))
    return values


def _column(opts, key, default=None) -> Optional[str]:
    if key not in opts:
        return default
    value = opts[key].strip()
    if not value:
        raise OptionError("disque: option '%s' is empty" % _name(key))
    return value


def parse_options(raw: Dict[str, str], mode: str) -> Options:
    """Validate ``raw`` (Spark's option map) for ``mode`` (:data:`READ`,
    :data:`STREAM_READ_MODE` or :data:`WRITE_MODE`)."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(raw).items()}
    allowed = set(COMMON)
    if mode == WRITE_MODE:
        allowed.update(WRITE)
    elif mode == STREAM_READ_MODE:
        allowed.update(STREAM_READ)
    for key in sorted(opts):
        if key in allowed or key in _SPARK_OWNED:
            continue
        if key in WRITE and key in STREAM_READ:
            raise OptionError("disque: option '%s' applies to writes and streaming reads, not to a %s"
                              % (_name(key), mode))
        if key in WRITE:
            raise OptionError("disque: option '%s' applies to writes only, not to a %s" % (_name(key), mode))
        if key in STREAM_READ:
            raise OptionError("disque: option '%s' applies to streaming reads only, not to a %s" % (_name(key), mode))
        known = ", ".join(_name(k) for k in sorted(allowed))
        raise OptionError("disque: unknown option '%s' for a %s (known options: %s)" % (key, mode, known))

    nodes = parse_nodes(opts.get("nodes", DEFAULT_NODES))
    queues = tuple(dict.fromkeys(q.strip() for q in opts.get("queue", "").split(",") if q.strip()))
    queue_column = _column(opts, "queuecolumn") if mode == WRITE_MODE else None
    if not queues and not queue_column:
        if mode == WRITE_MODE:
            raise OptionError("disque: no queue given: set option 'queue' (or 'queueColumn' for a per-row queue)")
        raise OptionError("disque: no queue given: set option 'queue' (one name or several, comma separated)")
    if mode == WRITE_MODE and len(queues) > 1:
        raise OptionError("disque: a write takes one queue, got %d (%s); use 'queueColumn' to spread rows"
                          % (len(queues), ",".join(queues)))
    username = opts.get("username") or None
    password = opts.get("password") or None
    max_deliveries = _int(opts, "maxdeliveries", 1, MAX_DELIVERIES)
    dead_letter = _column(opts, "deadletter")
    nack_delay_ms = _int(opts, "nackdelayms", 0, MAX_NACK_DELAY_MS)
    if mode == STREAM_READ_MODE:
        if dead_letter is not None and max_deliveries is None:
            raise OptionError("disque: option 'deadLetter' needs 'maxDeliveries' (the deliveries after which "
                              "a job is moved there)")
        if max_deliveries is not None and nack_delay_ms is None:
            raise OptionError("disque: option 'maxDeliveries' needs 'nackDelayMs': the jobs of a failed batch "
                              "count a delivery only when the source NACKs them as the query stops")
        if max_deliveries is not None:
            for q in queues:
                target = dead_letter_queue(dead_letter, q)
                if target in queues:
                    raise OptionError("disque: the dead-letter queue '%s' (of queue '%s') is also read by this "
                                      "query: set 'deadLetter' to another queue" % (target, q))
    return Options(
        nodes=nodes, queues=queues, username=username, password=password,
        replicate=_int(opts, "replicate", 1, 65535),
        retry=_int(opts, "retry", 0, 2 ** 31 - 1),
        ttl=_int(opts, "ttl", 1, 2 ** 31 - 1),
        delay=_int(opts, "delay", 0, 2 ** 31 - 1),
        async_=_bool(opts, "async"),
        timeout_ms=_int(opts, "timeout", 0, 2 ** 31 - 1, DEFAULT_ADDJOB_TIMEOUT_MS),
        body_column=_column(opts, "bodycolumn", "body"),
        queue_column=queue_column,
        dedup_column=_column(opts, "dedupcolumn"),
        max_jobs_per_trigger=_int(opts, "maxjobspertrigger", 1, 10 ** 7, DEFAULT_MAX_JOBS_PER_TRIGGER),
        working_interval=_float(opts, "workinginterval", 0.1, DEFAULT_WORKING_INTERVAL_S),
        priority=_int(opts, "priority", PRIORITY_MIN, PRIORITY_MAX),
        priority_column=_column(opts, "prioritycolumn"),
        backoff=_backoff(opts),
        max_deliveries=max_deliveries,
        dead_letter=dead_letter,
        nack_delay_ms=nack_delay_ms,
        fast_ack=_bool(opts, "fastack"),
    )
