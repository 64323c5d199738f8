"""Latency histograms the node keeps for its operators (``/metrics``, the
HTTP API): how long GETJOB waited, how long ADDJOB waited for its copies,
and how long jobs lived from ADDJOB to their ACK.

Buckets are fixed (milliseconds, ``BOUNDS``), so an observation is one
bisection and one increment, and the histograms of many nodes can be
summed by Prometheus.  Nothing here reads a clock: callers pass the
duration in milliseconds of the node's clock.

Invariants: ``sum(counts) == count``; ``counts[i]`` counts observations
``v`` with ``BOUNDS[i-1] < v <= BOUNDS[i]`` (the last slot: above every
bound), which is the Prometheus ``le`` convention once accumulated.
"""

from bisect import bisect_left
from typing import List, Tuple

#: Upper bounds of the buckets, in milliseconds: from a millisecond (a
#: replication on loopback) to an hour (a job that waited for a worker).
BOUNDS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
          300000, 900000, 3600000)


class Histogram:
    __slots__ = ("counts", "count", "total_ms")

    def __init__(self):
        self.counts = [0] * (len(BOUNDS) + 1)
        self.count = 0
        self.total_ms = 0

    def observe(self, ms: int) -> None:
        """Count one duration (negative ones, from a clock stepping back,
        count as 0)."""
        if ms < 0:
            ms = 0
        self.counts[bisect_left(BOUNDS, ms)] += 1
        self.count += 1
        self.total_ms += ms

    def cumulative(self) -> List[Tuple[float, int]]:
        """``[(upper bound in seconds, observations <= it)]``, ending with
        ``(inf, count)``: the Prometheus ``_bucket`` series."""
        out = []
        running = 0
        for bound, n in zip(BOUNDS + (float("inf"),), self.counts):
            running += n
            out.append((bound / 1000.0, running))
        return out

    def quantile(self, q: float) -> float:
        """An estimate of the ``q`` quantile in seconds, interpolated
        linearly inside its bucket as Prometheus' ``histogram_quantile``
        does (the top bucket answers its lower bound); 0.0 when empty."""
        if not self.count:
            return 0.0
        rank = q * self.count
        running = 0
        lower = 0
        for i, n in enumerate(self.counts):
            if n and running + n >= rank:
                if i == len(BOUNDS):
                    return lower / 1000.0
                upper = BOUNDS[i]
                return (lower + (upper - lower) * (rank - running) / n) / 1000.0
            running += n
            lower = BOUNDS[i] if i < len(BOUNDS) else lower
        return lower / 1000.0


class Latency:
    """The node's histograms, one attribute each (names as in /metrics)."""

    __slots__ = ("getjob_wait", "addjob_replication", "add_to_ack")

    NAMES = (
        ("getjob_wait", "GETJOB wait: 0 for jobs served at once, else from blocking to the job or the timeout."),
        ("addjob_replication", "ADDJOB replication: from ADDJOB until the copies asked for are confirmed."),
        ("add_to_ack", "Job time from ADDJOB to its ACKJOB or FASTACK on this node."),
    )

    def __init__(self):
        self.getjob_wait = Histogram()
        self.addjob_replication = Histogram()
        self.add_to_ack = Histogram()
