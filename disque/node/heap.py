"""Keep the cyclic garbage collector off the node's long-lived objects.

CPython's full (generation 2) collection walks every tracked object.  A node
holds one tracked ``Job`` per job, so at 1M jobs a full collection stops the
event loop for about half a second (measured: 0.51 s on the dev box), and
with jobs arriving it triggers again each time the old generation grows by a
quarter: a latency spike for every client and a heartbeat gap on the bus.

Jobs never form reference cycles (a job refers to bytes, ints and a tuple of
node IDs), and neither do the node's other long-lived objects once their
owner lets go (``tests/unit/test_heap.py`` checks that the node leaves no cyclic
garbage behind; Twisted breaks its own transport/protocol cycle on close).
Reference counting frees them; the cycle collector only has to look at
what is new.  So every ``interval`` seconds this service collects every
generation and then ``gc.freeze()``s what survived: frozen objects are
still freed by reference counting when they die, but collections no longer
walk them, so each of these collections (and any the interpreter starts)
costs only what was allocated since the last freeze.  It must be every
generation, not just the young ones: an object that outlived two young
collections is in the old one, and a cycle of those that died since would
otherwise be frozen as garbage.

The trade-off: a reference cycle that is alive at a freeze and becomes
garbage later is never collected by these collections.  The node makes
such cycles on the bus only: a link to a peer (Twisted's ``ClientService``
is a cycle by design: its state machine and its core point at each other),
let go when the peer is forgotten, its handshake expires or it moves; and
a connection attempt in flight at a freeze that then fails (the endpoint's
connector, its factory wrapper, its Deferred and Failure: about one object
a second per unreachable peer).  The code letting go of one calls
:func:`frozen_cycles_released`, and the freezer's next run unfreezes
everything, runs a full collection and freezes again, provided the last
such collection is old enough: :data:`FULL_COLLECTION_SPACING` seconds,
and at least :data:`FULL_COLLECTION_COST` times as long as that collection
took.  So the pause (~0.5 s per million jobs) comes only while links are
dropped or peers are unreachable, and costs at most a thousandth of the
node's time; memory no longer grows with every dropped link or failed
attempt (the fuzzer's MEET storms made that tens of MB).  Applications embedding the node that let go of cycles
of their own can call it too, or set ``gc-freeze-interval 0`` to leave the
collector alone (the default for the embedding API is the same as for
``twistd``: on).

This is CPython's policy only.  PyPy has no ``gc.freeze`` and no need of
one: its major collections are incremental (no long pause), and there
``gc.collect(1)`` would be a full collection, so a periodic one would keep
a core busy walking an idle node's jobs.  On PyPy the directive is fixed at
0 (``disque.config``) and no freezer is made.
"""

import gc
import time

from twisted.application.internet import TimerService


#: Least seconds between two full collections asked for by
#: :func:`frozen_cycles_released`.
FULL_COLLECTION_SPACING = 60.0
#: ... and at least this many times as long as the last one took.
FULL_COLLECTION_COST = 1000


class _Released:
    """Process-wide, as the collector is: whether a frozen cycle may have
    died since the last full collection, and when the next may run."""
    pending = False
    next_full = float("-inf")


def frozen_cycles_released() -> None:
    """A long-lived reference cycle was let go: have the freezer run a full
    collection (see the module docstring).  Cheap: it only sets a flag."""
    _Released.pending = True


def freeze_survivors(now: float = None) -> None:
    """Collect what is not frozen, freeze the survivors; with a cycle
    released (and ``now``, seconds, at least FULL_COLLECTION_SPACING after
    the last full collection), unfreeze everything first.  (Without that,
    both are cheap whatever the heap holds; ``gc.get_freeze_count()`` is
    not: it walks every frozen object, ~5 ms per million, so it is not
    asked here.)"""
    if _Released.pending and now is not None and now >= _Released.next_full:
        _Released.pending = False
        gc.unfreeze()
        started = time.perf_counter()
        gc.collect()
        took = time.perf_counter() - started
        _Released.next_full = now + max(FULL_COLLECTION_SPACING, FULL_COLLECTION_COST * took)
    else:
        gc.collect()
    gc.freeze()


def heap_freezer(clock, interval: float):
    """A ``TimerService`` freezing survivors every ``interval`` seconds, the
    first time when it starts (start-up garbage: imports, config, the AOF
    load); None for ``interval`` 0, which leaves the collector alone."""
    if interval <= 0:
        return None
    service = TimerService(interval, lambda: freeze_survivors(clock.seconds()))
    service.clock = clock
    service.setName("heap-freezer")
    return service
