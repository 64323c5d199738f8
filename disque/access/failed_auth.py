"""Failed authentications: counted, logged once per source a minute, and
slowed down.

A client sending a wrong ``AUTH`` password (or a wrong HTTP password) and a
bus peer failing the ``cluster-password`` handshake (:mod:`disque.bus.auth`)
are reported here, and so are clients refused by protected mode
(:mod:`disque.access.protection`).  The counters are INFO's ``auth_failures``,
``auth_delayed``, ``auth_refused`` and ``bus_auth_failures``
(:class:`disque.commands.context.Stats`).

The log (:class:`FailedAuth`) gets one warning per kind and source address
when its first event comes, then nothing more from that source for
:data:`WINDOW` seconds; the next line says how many it did not log
(:class:`disque.io.log_limit.LogLimit`).  A
password-guessing client thus costs the log a line a minute, not a line
per attempt.

The client side is also slowed (:class:`Throttle`), per source address
(the client's address without its port): after :data:`DELAY_AFTER`
failures in a row, the reply to each failed AUTH leaves :data:`FIRST_DELAY`
seconds late, twice as late at each failure after that, :data:`MAX_DELAY`
at most (the node serves everyone else meanwhile); after
:data:`BLOCK_AFTER` failures within :data:`WINDOW` seconds the source is
refused for :data:`BLOCK_SECONDS`: its AUTHs are answered with an error
without the password being looked at, so guessing stops.  A successful
AUTH forgets the source, and so does a minute without a failure from it
(once any refusal is over).

Invariant, for both tables: at most :data:`MAX_SOURCES` entries, in the
order of their last event; those whose time has passed are dropped as time
goes, and past the bound the oldest go first (a source dropped early is
treated as new: its next event is logged, its next failure the first).
"""

from collections import deque

from ..io.log_limit import LogLimit

WINDOW = 60.0
MAX_SOURCES = 4096

#: Failures in a row from one source before its failed AUTHs are answered late.
DELAY_AFTER = 3
#: The first delay (s); doubled at each failure after it, up to MAX_DELAY.
FIRST_DELAY = 0.1
MAX_DELAY = 2.0
#: Failures within WINDOW seconds after which a source is refused ...
BLOCK_AFTER = 10
#: ... for this long (s).
BLOCK_SECONDS = 60.0


def client_source(client) -> str:
    """The source a client's failures count against: its address without
    the port (``127.0.0.1``, ``::1``)."""
    return client.addr.rpartition(b":")[0].decode(errors="replace")


class FailedAuth:
    """The log of failed authentications and refused clients.
    ``clock()``: seconds; ``log``: a twisted Logger."""

    def __init__(self, clock, log):
        self._log = log
        self._limit = LogLimit(clock, WINDOW, MAX_SOURCES)  # keys: (kind, source)

    def __len__(self):
        """How many (kind, source) the log remembers."""
        return len(self._limit)

    def record(self, kind: str, source: str, reason: str) -> bool:
        """Note a failure of ``kind`` ("client" or "bus") from ``source`` (an
        address); True if it was logged."""
        return self._once((kind, source), "Failed {kind} authentication from {source}: {reason}{more}",
                          "failures", kind=kind, source=source, reason=reason)

    def denied(self, source: str, reason: str) -> bool:
        """Note a client from ``source`` refused at connection (protected
        mode); True if it was logged."""
        return self._once(("denied", source), "Refused client from {source}: {reason}{more}", "refusals",
                          source=source, reason=reason)

    def _once(self, key, text, what, **fields) -> bool:
        unlogged = self._limit.admit(key)
        if unlogged is None:
            return False
        more = " (%d more %s not logged in the last minute)" % (unlogged, what) if unlogged else ""
        self._log.warn(text, more=more, **fields)
        return True


class _Source:
    """One source's recent failures."""

    __slots__ = ("streak", "recent", "last", "blocked_until")

    def __init__(self):
        self.streak = 0  # failures in a row
        self.recent = deque(maxlen=BLOCK_AFTER)  # when the latest failures came
        self.last = 0.0  # when the latest came
        self.blocked_until = 0.0


def _forgotten(entry, now):
    return now - entry.last >= WINDOW and now >= entry.blocked_until


class Throttle:
    """Failed client authentications per source: how late to answer them,
    and which sources are refused (see the module docstring).
    ``clock()``: seconds."""

    def __init__(self, clock):
        self._clock = clock
        self._sources = {}  # source -> _Source, in the order of their latest failure

    def __len__(self):
        return len(self._sources)

    def refused_for(self, source: str) -> float:
        """Seconds ``source`` is still refused for (0.0: it may try)."""
        entry = self._sources.get(source)
        if entry is None:
            return 0.0
        return max(entry.blocked_until - self._clock(), 0.0)

    def failed(self, source: str):
        """Note a failure from ``source``; return ``(delay, blocked)``: the
        seconds its reply must wait (0.0: none), and whether this failure
        starts a refusal."""
        now = self._clock()
        sources = self._sources
        entry = sources.pop(source, None)
        if entry is None or _forgotten(entry, now):
            entry = _Source()
        sources[source] = entry
        entry.streak += 1
        entry.last = now
        recent = entry.recent
        recent.append(now)
        blocked = len(recent) == BLOCK_AFTER and now - recent[0] < WINDOW and now >= entry.blocked_until
        if blocked:
            entry.blocked_until = now + BLOCK_SECONDS
            recent.clear()
        while len(sources) > 1:  # the oldest, while forgotten or too many (never this one)
            oldest = next(iter(sources))
            if not _forgotten(sources[oldest], now) and len(sources) <= MAX_SOURCES:
                break
            del sources[oldest]
        excess = entry.streak - DELAY_AFTER
        delay = min(FIRST_DELAY * 2 ** min(excess - 1, 16), MAX_DELAY) if excess > 0 else 0.0
        return delay, blocked

    def succeeded(self, source: str) -> None:
        """A success from ``source``: it starts afresh."""
        self._sources.pop(source, None)
