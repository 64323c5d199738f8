"""``watchdog-period``: when the event loop stalls, log where the node is
stuck.

With ``watchdog-period`` N > 0 (milliseconds) a real-time timer
(``setitimer(ITIMER_REAL)``, delivering SIGALRM) is armed to N ms and
re-armed by a reactor timer every N/4 ms.  If the reactor does not turn for
about N ms -- a command that runs long, ``DEBUG SLEEP``, a blocked disk --
the timer fires and the handler logs, at warning level,
``--- WATCHDOG TIMER EXPIRED ---`` followed by the Python stack of the code
that holds the loop, as the original's software watchdog does.  The period
is at least two ticks (2000/hz ms, as in the original) so that a node doing
nothing but its periodic work never trips it.  0 (the default) disarms the
timer and puts the previous SIGALRM handler back.  CONFIG SET takes effect
at once.  Signals need the main thread and a Unix system: where they are
unavailable, setting a period is refused.
"""

import signal
import traceback

from twisted.application.service import Service
from twisted.internet import task

from ..config import ConfigSetError
from .logs import logger

log = logger("disque.node.watchdog")

BANNER = "--- WATCHDOG TIMER EXPIRED ---"


class Watchdog(Service):
    """The software watchdog of one node, following ``watchdog-period``."""

    def __init__(self, config, clock):
        self.config = config
        self.period_ms = 0  # in effect (after the two-tick minimum); 0: off
        self._rearm = task.LoopingCall(self._arm)
        self._rearm.clock = clock
        self._previous = None  # the SIGALRM handler we replaced
        self._forget = None

    def startService(self):
        super().startService()
        self._forget = self.config.on_change("watchdog-period", self.set_period)

    def stopService(self):
        if self._forget is not None:
            self._forget()
            self._forget = None
        self.set_period(0)
        return super().stopService()

    def set_period(self, ms: int) -> None:
        if ms:
            ms = max(ms, 2000 // self.config["hz"])
            if not self.period_ms:
                try:
                    self._previous = signal.signal(signal.SIGALRM, self._expired)
                except (AttributeError, ValueError) as e:  # no SIGALRM; not the main thread
                    raise ConfigSetError(b"The watchdog needs signals: " + str(e).encode()) from None
            elif self._rearm.running:
                self._rearm.stop()
            self.period_ms = ms
            self._rearm.start(ms / 4000.0, now=True)
        elif self.period_ms:
            self._rearm.stop()
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)
            self._previous = None
            self.period_ms = 0

    def _arm(self):
        signal.setitimer(signal.ITIMER_REAL, self.period_ms / 1000.0)

    def _expired(self, signum, frame):
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no Python frame)\n"
        log.warn("{banner}\n{stack}--------", banner=BANNER, stack=stack)
