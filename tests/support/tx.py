"""Twisted code from plain pytest tests: the global reactor runs in a
daemon thread for the whole session (started on first use, stopped at
exit), and ``run`` calls a function there and waits for its Deferred.

``Sync(client)`` wraps a :class:`~disque.client.txclient.DisqueClient` so
every method blocks for its result, which lets one test body drive the
Twisted client and the blocking client alike: ``make_client(kind, ...)``
for each of ``KINDS``.
"""

import atexit
import threading

from twisted.internet import defer, threads

RUN_TIMEOUT = 90.0
_started = threading.Event()
_reactor = None


def reactor():
    global _reactor
    if _reactor is None:
        from twisted.internet import reactor as r

        _reactor = r
        thread = threading.Thread(target=r.run, kwargs={"installSignalHandlers": False},
                                  name="twisted-reactor", daemon=True)
        r.callWhenRunning(_started.set)
        thread.start()
        if not _started.wait(10):
            raise RuntimeError("the reactor thread did not start")

        def stop():
            if r.running:
                r.callFromThread(r.stop)
                thread.join(5)

        atexit.register(stop)
    return _reactor


def run(f, *args, **kwargs):
    """``f(*args, **kwargs)`` in the reactor thread; its (Deferred's) result.
    Fails with TimeoutError after RUN_TIMEOUT seconds."""
    r = reactor()

    def call():
        d = defer.maybeDeferred(f, *args, **kwargs)
        d.addTimeout(RUN_TIMEOUT, r)
        return d

    return threads.blockingCallFromThread(r, call)


class Sync:
    """A Twisted client seen as a blocking one (``qscan``/``jscan`` give
    every item as a list)."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        attr = getattr(self.client, name)
        if name in ("qscan", "jscan"):
            return lambda **kw: run(lambda: attr(**kw).collect())
        if not callable(attr):
            return attr
        return lambda *a, **kw: run(attr, *a, **kw)

    def close(self):
        run(self.client.disconnect)


KINDS = ["twisted", "blocking"]


def make_client(kind, nodes, **options):
    """A client of ``kind`` (``"twisted"``: a :class:`Sync` one) on
    ``nodes`` (NodeProcess objects or ports of 127.0.0.1)."""
    from disque.client import BlockingClient, DisqueClient

    seeds = [("127.0.0.1", n) if isinstance(n, int) else ("127.0.0.1", n.port) for n in nodes]
    if kind == "twisted":
        return Sync(DisqueClient(seeds, reactor=reactor(), **options))
    return BlockingClient(seeds, **options)
