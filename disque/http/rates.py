"""Rates for the dashboard: the node's counters sampled once a second.

The core keeps only counters (QSTAT's jobs-in and jobs-out, and the ACKs
and NACKs of each queue); the HTTP side turns them into rates by sampling
them.  Every rate is per second over one window, the last ``RECENT``
seconds (10 s), so the chart, its legend and the queues table say the
same thing: a queue's rates (:meth:`Rates.of_queue`) and the node-wide
ones of each sample (``samples``, the last ``KEEP`` seconds: the charts)
are measured between the same two snapshots of the queues' counters, and
a sample's rates are the sums of its queues'.

A queue that appears between two snapshots counts from zero; one reclaimed
and created again (its counters restart) counts nothing negative; one
reclaimed within the window drops out of the sums with its counters.
Sampling visits every queue once a second: O(queues), nothing per job.
"""

from collections import deque

from ..commands import views

INTERVAL = 1.0  # seconds between samples
KEEP = 300  # samples of node-wide rates (5 minutes)
RECENT = 10  # seconds over which a queue's rates are measured


class Rates:
    """The samples of the node seen through ``ctx`` (a command Context:
    its counters are read through disque.commands.views)."""

    def __init__(self, ctx, keep: int = KEEP, recent: int = RECENT):
        self.ctx = ctx
        self.window = recent  # seconds: the one window of every rate
        self.samples = deque(maxlen=keep)  # dicts, oldest first (the /api/rates reply)
        self._snaps = deque(maxlen=recent + 1)  # (t ms, {queue name: (in, out, acked, nacked)})

    def sample(self, now_ms: int) -> None:
        snap = {}
        queued = 0
        for name, length, added, removed, acked, nacked, _ in views.queue_counters(self.ctx):
            snap[name] = (added, removed, acked, nacked)
            queued += length
        self._snaps.append((now_ms, snap))
        if len(self._snaps) < 2:
            return
        then, before = self._snaps[0]
        seconds = max(now_ms - then, 1) / 1000.0
        added = removed = acked = nacked = 0
        for name, (a, r, k, n) in snap.items():
            old = before.get(name, _ZERO)
            added += max(a - old[0], 0)
            removed += max(r - old[1], 0)
            acked += max(k - old[2], 0)
            nacked += max(n - old[3], 0)
        self.samples.append({
            "t": now_ms, "added": added / seconds, "removed": removed / seconds,
            "acked": acked / seconds, "nacked": nacked / seconds, "queued": queued,
        })

    def of_queue(self, name: bytes):
        """``(in, out, acked, nacked)`` per second for queue ``name`` over
        the last ``RECENT`` seconds (zeros before two samples)."""
        if len(self._snaps) < 2:
            return (0.0, 0.0, 0.0, 0.0)
        (then, before), (now, latest) = self._snaps[0], self._snaps[-1]
        current = latest.get(name)
        if current is None:
            return (0.0, 0.0, 0.0, 0.0)
        old = before.get(name, _ZERO)
        seconds = max(now - then, 1) / 1000.0
        return tuple(max(c - o, 0) / seconds for c, o in zip(current, old))


_ZERO = (0, 0, 0, 0)
