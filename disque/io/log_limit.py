"""A line a minute per key: what a stranger can repeat at will costs the
log one line a minute, not one per attempt.

:class:`LogLimit` says whether a line of some key (a source address, a
kind of event) may be written now, and how many of that key it folded
since the last one written, for that line to say so.

Invariant: the table holds at most ``max_keys`` keys, in the order they
were last let through; those whose window has passed are dropped as time
goes (a dropped key's next line is let through at once, as it would be
anyway), and past the bound the oldest go first.
"""

WINDOW = 60.0
MAX_KEYS = 4096


class LogLimit:
    """``clock()``: seconds."""

    def __init__(self, clock, window: float = WINDOW, max_keys: int = MAX_KEYS):
        self._clock = clock
        self._window = window
        self._max_keys = max_keys
        self._keys = {}  # key -> [when last let through, lines folded since], oldest first

    def __len__(self):
        """How many keys the table holds."""
        return len(self._keys)

    def admit(self, key):
        """None if a line of ``key`` was let through less than a window ago
        (this one is folded, and counted); else the number folded since
        that line (0 the first time): write the line now."""
        now = self._clock()
        keys = self._keys
        entry = keys.get(key)
        if entry is not None and now - entry[0] < self._window:
            entry[1] += 1
            return None
        folded = entry[1] if entry is not None else 0
        keys.pop(key, None)
        keys[key] = [now, 0]
        while True:  # ends at the latest, which is the key just let through
            oldest = next(iter(keys))
            if now - keys[oldest][0] < self._window and len(keys) <= self._max_keys:
                break
            del keys[oldest]
        return folded
