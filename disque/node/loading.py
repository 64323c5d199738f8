"""Loading the AOF in the background.

An AOF too big to load at once (``IPersistence.begin_load`` returns a
step) loads after the service starts, a slice of ``LOAD_SLICE`` seconds per
reactor turn, as the original loads with its event loop running.
Meanwhile the runtime answers ``-LOADING`` (``NodeRuntime.start_loading``)
and nothing is due; once the state is back the runtime serves everyone,
then the service starts what waited (``ready``: the tick).  A file found
unusable half way logs the error in one line (a traceback for anything
but a ``LoadError``) and stops the node (``on_shutdown``).

Invariant: ``active`` is true from construction with a step until the
load ends, fails or is cancelled; waiters fire exactly once, or never if
the service stops first.
"""

from twisted.internet import defer
from twisted.python.failure import Failure

from ..interfaces import LoadError
from ..io.logs import logger

log = logger("disque")

#: While the AOF loads in the background, records are applied for this long
#: (seconds) per reactor turn; clients, INFO and the HTTP side are served
#: between two slices.
LOAD_SLICE = 0.01


class BackgroundLoad:
    """The load of one node's AOF, ``step`` (None: nothing left to load)."""

    def __init__(self, step, runtime, ready, on_shutdown):
        self.step = step
        self.runtime = runtime
        self.ready = ready  # called once the state is back, before the waiters
        self.on_shutdown = on_shutdown
        self._call = None
        self._waiters = []
        if step is not None:
            runtime.start_loading()

    @property
    def active(self):
        return self.step is not None

    def when_loaded(self):
        """A Deferred that fires (None) once the node has its state and
        serves every command, or fails with the ``LoadError`` that stopped
        the load; it never fires if the service stops first."""
        if self.step is None:
            return defer.succeed(None)
        d = defer.Deferred()
        self._waiters.append(d)
        return d

    def start(self):
        self._call = self.runtime.reactor.callLater(0, self._slice)

    def cancel(self):
        """The service stops (``persistence.close()`` abandons the load)."""
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _slice(self):
        self._call = None
        runtime = self.runtime
        if self.step is None or runtime.shutting_down:
            return
        try:
            done = self.step(LOAD_SLICE)
        except Exception as e:
            self._failed(e)
            return
        if done:
            self._loaded()
        else:
            self._call = runtime.reactor.callLater(0, self._slice)

    def _loaded(self):
        """The state is back: serve everyone, then start what waited."""
        self.step = None
        runtime = self.runtime
        runtime.finish_loading()
        runtime.set_time()
        runtime.node.persist = runtime.persistence.enabled
        self.ready()
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.callback(None)

    def _failed(self, error):
        """The file turned out unusable half way (or the load broke): the
        node cannot serve this state."""
        self.step = None
        if isinstance(error, LoadError):
            log.error("{error}", error=str(error))
        else:
            log.failure("Loading the AOF failed", failure=Failure(error))
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            d.errback(error)
        self.on_shutdown()
