"""Rates for the dashboard: the node's counters sampled once a second.

The core keeps only counters (QSTAT's jobs-in and jobs-out, and the ACKs
and NACKs of each queue); the HTTP side turns them into rates by sampling
them.  ``samples`` holds the node-wide rates of the last ``KEEP`` seconds
(the charts); the per-queue counters are kept for the last ``RECENT``
seconds only (the rates of the queues table).

A queue that appears between two samples counts from zero; one reclaimed
and created again (its counters restart) counts nothing negative.
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
        self.samples = deque(maxlen=keep)  # dicts, oldest first (the /api/rates reply)
        self._snaps = deque(maxlen=recent + 1)  # (t ms, {queue name: (in, out, acked, nacked)})
        self._totals = None  # (acks, nacks) node-wide at the last sample

    def sample(self, now_ms: int) -> None:
        snap = {}
        queued = 0
        for name, length, added, removed, acked, nacked, _ in views.queue_counters(self.ctx):
            snap[name] = (added, removed, acked, nacked)
            queued += length
        totals = views.ack_totals(self.ctx)
        if self._snaps:
            then, before = self._snaps[-1]
            seconds = max(now_ms - then, 1) / 1000.0
            added = removed = 0
            for name, (jobs_in, jobs_out, _, _) in snap.items():
                old = before.get(name)
                if old is None:
                    added += jobs_in
                    removed += jobs_out
                else:
                    added += max(jobs_in - old[0], 0)
                    removed += max(jobs_out - old[1], 0)
            self.samples.append({
                "t": now_ms, "added": added / seconds, "removed": removed / seconds,
                "acked": (totals[0] - self._totals[0]) / seconds, "nacked": (totals[1] - self._totals[1]) / seconds,
                "queued": queued,
            })
        self._totals = totals
        self._snaps.append((now_ms, snap))

    def of_queue(self, name: bytes):
        """``(in, out, acked, nacked)`` per second for queue ``name`` over
        the last ``RECENT`` seconds (zeros before two samples)."""
        if len(self._snaps) < 2:
            return (0.0, 0.0, 0.0, 0.0)
        (then, before), (now, latest) = self._snaps[0], self._snaps[-1]
        current = latest.get(name)
        if current is None:
            return (0.0, 0.0, 0.0, 0.0)
        old = before.get(name, (0, 0, 0, 0))
        seconds = max(now - then, 1) / 1000.0
        return tuple(max(c - o, 0) / seconds for c, o in zip(current, old))
