"""Failed authentications: every one counted, logged once per source a minute.

A client sending a wrong ``AUTH`` password and a bus peer failing the
``cluster-password`` handshake (:mod:`disque.bus.auth`) are reported here.
The counters are INFO's ``auth_failures`` and ``bus_auth_failures``
(:class:`disque.commands.context.Stats`).  The log gets one warning per
kind and source address when its first failure comes, then nothing more
from that source for :data:`WINDOW` seconds; the next line says how many
failures it did not log.  A password-guessing client thus costs the log a
line a minute, not a line per attempt.

Invariant: the table of sources holds at most :data:`MAX_SOURCES`
entries, in the order they were last logged; those whose window has passed
are dropped as time goes (a dropped source's next failure is logged at
once, as it would be anyway), and past the bound the oldest go first.
"""

WINDOW = 60.0
MAX_SOURCES = 4096


class FailedAuth:
    """``clock()``: seconds; ``log``: a twisted Logger."""

    def __init__(self, clock, log):
        self._clock = clock
        self._log = log
        self._sources = {}  # (kind, source) -> [when last logged, failures not logged since], oldest first

    def record(self, kind: str, source: str, reason: str) -> bool:
        """Note a failure of ``kind`` ("client" or "bus") from ``source`` (an
        address); True if it was logged."""
        now = self._clock()
        key = (kind, source)
        entry = self._sources.get(key)
        if entry is not None and now - entry[0] < WINDOW:
            entry[1] += 1
            return False
        unlogged = entry[1] if entry is not None else 0
        more = " (%d more failures not logged in the last minute)" % unlogged if unlogged else ""
        self._log.warn("Failed {kind} authentication from {source}: {reason}{more}",
                       kind=kind, source=source, reason=reason, more=more)
        sources = self._sources
        sources.pop(key, None)
        sources[key] = [now, 0]
        while True:  # ends at the latest, which is the key just logged
            oldest = next(iter(sources))
            if now - sources[oldest][0] < WINDOW and len(sources) <= MAX_SOURCES:
                break
            del sources[oldest]
        return True
