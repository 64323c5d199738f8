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
"""

import gc

from twisted.application.service import Service
from twisted.internet import task


def freeze_survivors() -> int:
    """Collect the young generations, freeze the survivors; return how many
    objects are frozen in total."""
    gc.collect(1)
    gc.freeze()
    return gc.get_freeze_count()


class HeapFreezer(Service):
    name = "heap-freezer"

    def __init__(self, reactor, interval: float):
        self.reactor = reactor
        self.interval = interval
        self._loop = None

    def startService(self):
        super().startService()
        if self.interval > 0:
            freeze_survivors()  # start-up garbage (imports, config) first
            self._loop = task.LoopingCall(freeze_survivors)
            self._loop.clock = self.reactor
            self._loop.start(self.interval, now=False)

    def stopService(self):
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        self._loop = None
        return super().stopService()
