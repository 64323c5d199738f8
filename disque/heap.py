"""Keep the cyclic garbage collector off the node's long-lived objects.

CPython's full (generation 2) collection walks every tracked object.  A node
holds one tracked ``Job`` per job, so at 1M jobs a full collection stops the
event loop for about half a second (measured: 0.51 s on the dev box), and
with jobs arriving it triggers again each time the old generation grows by a
quarter: a latency spike for every client and a heartbeat gap on the bus.

Jobs never form reference cycles (a job refers to bytes, ints and a tuple of
node IDs), and neither do the node's other long-lived objects once their
owner lets go (``tests/test_heap.py`` checks that the node leaves no cyclic
garbage behind; Twisted breaks its own transport/protocol cycle on close).
Reference counting frees them; the cycle collector only has to look at
young objects.  So every ``interval`` seconds this service collects the
young generations and then ``gc.freeze()``s what survived: frozen objects are
still freed by reference counting when they die, but full collections no
longer walk them, and a full collection costs only what was allocated since
the last freeze.

The trade-off, for applications embedding the node: a reference cycle that
is alive at a freeze and becomes garbage later is never collected.  Set
``gc-freeze-interval 0`` to leave the collector alone (the default for the
embedding API is the same as for ``twistd``: on).

This is CPython's policy only.  PyPy has no ``gc.freeze`` and no need of
one: its major collections are incremental (no long pause), and there
``gc.collect(1)`` would be a full collection, so a periodic one would keep
a core busy walking an idle node's jobs.  On PyPy the directive is fixed at
0 (``disque.config``) and no freezer is made.
"""

import gc

from twisted.application.internet import TimerService


def freeze_survivors() -> None:
    """Collect the young generations, freeze the survivors.  (Both are
    cheap whatever the heap holds; ``gc.get_freeze_count()`` is not: it
    walks every frozen object, ~5 ms per million, so it is not asked here.)"""
    gc.collect(1)
    gc.freeze()


def heap_freezer(clock, interval: float):
    """A ``TimerService`` freezing survivors every ``interval`` seconds, the
    first time when it starts (start-up garbage: imports, config, the AOF
    load); None for ``interval`` 0, which leaves the collector alone."""
    if interval <= 0:
        return None
    service = TimerService(interval, freeze_survivors)
    service.clock = clock
    service.setName("heap-freezer")
    return service
