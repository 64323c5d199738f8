"""The node's timers whose period follows a directive: one service,
:class:`DirectiveTimer`, used three times.

* ``hz``: the periodic tick (:meth:`disque.node.runtime.NodeRuntime.tick`),
  ``1/hz`` seconds apart, its first run at once; CONFIG SET restarts it
  with the new period (a set to the same rate changes nothing).
* ``timeout`` (:class:`IdleClients`): close client connections idle for
  more than that many seconds (0, the default: never).  As in the
  original, a client is idle since its last request or reply, and a client
  that waits on the node is never idle: one parked in GETJOB (its own
  TIMEOUT applies), one whose ADDJOB waits for its copies, one whose
  requests wait for CLIENT PAUSE to end, and a MONITOR (a listener by
  design).  The check runs once a second while ``timeout`` is set, and not
  at all while it is 0; CONFIG SET timeout starts or stops it at once.
* ``watchdog-period`` (:class:`Watchdog`): when the event loop stalls, log
  where the node is stuck.  With N > 0 (milliseconds) a real-time timer
  (``setitimer(ITIMER_REAL)``, delivering SIGALRM) is armed to N ms and
  re-armed every N/4 ms.  If the reactor does not turn for about N ms --
  a command that runs long, ``DEBUG SLEEP``, a blocked disk -- the timer
  fires and the handler logs, at warning level, ``--- WATCHDOG TIMER
  EXPIRED ---`` followed by the Python stack of the code that holds the
  loop, as the original's software watchdog does.  The period is at least
  two ticks (2000/hz ms, as in the original) so that a node doing nothing
  but its periodic work never trips it.  0 (the default) disarms the timer
  and puts the previous SIGALRM handler back.  Signals need the main
  thread and a Unix system: where they are unavailable, setting a period
  is refused.

Invariants: a timer follows its directive only while its service runs (it
registers at start and forgets at stop, and is stopped with the service);
its loop runs exactly while the period in force (``step``) is not 0.
"""

import signal
import traceback

from twisted.application.service import Service
from twisted.internet import task

from ..config import ConfigSetError
from ..io.logs import logger

log = logger("disque.timers")
clients_log = logger("disque.clients")
watchdog_log = logger("disque.watchdog")

BANNER = "--- WATCHDOG TIMER EXPIRED ---"
IDLE_CHECK_INTERVAL = 1.0  # seconds; the directive counts whole seconds


class DirectiveTimer(Service):
    """Calls ``call`` every ``period(value)`` seconds while the service runs,
    ``value`` being the directive's value now and at each CONFIG SET; a
    period of 0 stops the calls.  ``now``: whether a (re)started loop
    calls at once.  A call that raises stops the loop and is logged."""

    def __init__(self, config, clock, directive, call, period, now=False):
        self.config = config
        self.directive = directive
        self.period = period
        self.step = 0  # the period in force, in seconds; 0: stopped
        self._now = now
        self._loop = task.LoopingCall(call)
        self._loop.clock = clock
        self._forget = None

    def startService(self):
        super().startService()
        self._forget = self.config.on_change(self.directive, self.follow)

    def stopService(self):
        if self._forget is not None:
            self._forget()
            self._forget = None
        self.off()
        return super().stopService()

    def follow(self, value) -> None:
        """The directive's value, at start and at each CONFIG SET."""
        self.set_step(self.period(value))

    def off(self) -> None:
        """Stop the calls (the service stops)."""
        self.set_step(0)

    def set_step(self, step) -> None:
        if step == self.step and self._loop.running == bool(step):
            return
        if self._loop.running:
            self._loop.stop()
        self.step = step
        if step:
            self._loop.start(step, now=self._now).addErrback(self._failed)

    def _failed(self, failure):
        log.failure("The {directive} timer failed: it stops", failure=failure, directive=self.directive)


def hz_timer(config, clock, tick) -> DirectiveTimer:
    """The periodic tick, ``hz`` times a second, its first run at once."""
    return DirectiveTimer(config, clock, "hz", tick, lambda hz: 1.0 / max(hz, 1), now=True)


class IdleClients(DirectiveTimer):
    """Closes the idle clients of one node runtime
    (:class:`disque.node.runtime.NodeRuntime`) while ``timeout`` is set."""

    def __init__(self, runtime):
        super().__init__(runtime.config, runtime.reactor, "timeout", self.check,
                         lambda seconds: IDLE_CHECK_INTERVAL if seconds else 0)
        self.runtime = runtime
        self.timeout = 0

    def follow(self, seconds: int) -> None:
        self.timeout = seconds
        super().follow(seconds)

    def check(self) -> int:
        """Close every client idle for more than ``timeout`` seconds; return
        how many."""
        runtime = self.runtime
        runtime.set_time()
        now = runtime.node.now // 1000
        closed = 0
        for client in list(runtime.ctx.clients.values()):
            if now - client.atime > self.timeout and not client.monitor and client.conn.idle():
                clients_log.debug("Closing idle client {addr} (idle {seconds} s)", addr=client.addr.decode(),
                                  seconds=now - client.atime)
                client.conn.close()
                closed += 1
        return closed


class Watchdog(DirectiveTimer):
    """The software watchdog of one node, following ``watchdog-period``:
    the timer re-arms the real-time one every quarter period."""

    def __init__(self, config, clock):
        super().__init__(config, clock, "watchdog-period", self._arm, lambda ms: ms / 4000.0, now=True)
        self.period_ms = 0  # in effect (after the two-tick minimum); 0: off
        self._previous = None  # the SIGALRM handler we replaced

    def follow(self, ms: int) -> None:
        if ms:
            ms = max(ms, 2000 // self.config["hz"])
            if not self.period_ms:
                try:
                    self._previous = signal.signal(signal.SIGALRM, self._expired)
                except (AttributeError, ValueError) as e:  # no SIGALRM; not the main thread
                    raise ConfigSetError(b"The watchdog needs signals: " + str(e).encode()) from None
            self.period_ms = ms
            super().follow(ms)
        elif self.period_ms:
            self.set_step(0)
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)
            self._previous = None
            self.period_ms = 0

    def off(self) -> None:
        self.follow(0)

    def _arm(self):
        signal.setitimer(signal.ITIMER_REAL, self.period_ms / 1000.0)

    def _expired(self, signum, frame):
        stack = "".join(traceback.format_stack(frame)) if frame is not None else "(no Python frame)\n"
        watchdog_log.warn("{banner}\n{stack}--------", banner=BANNER, stack=stack)
