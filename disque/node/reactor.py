"""The epoll reactor without a log context per socket event.

Twisted's ``EPollReactor.doPoll`` hands every ready socket to
``_doReadOrWrite`` through ``log.callWithLogger``, which asks the
protocol for its log prefix and pushes a legacy-log context (a dict copy
and two context-stack calls) around each read and write.  For a node
serving small requests that is most of the reactor's own cost per request:
measured with ``benchmarks/compare.py`` (node CPU per request, same run),
PING 16.8 -> 13.3 us and ADDJOB 26.4 -> 23.5 us on CPython, 9.7 -> 8.9 and
17.0 -> 15.2 us on PyPy.

:class:`LeanEPollReactor` is that reactor with ``doPoll`` calling
``_doReadOrWrite`` directly.  What changes: a message logged through the
legacy ``twisted.python.log`` while a socket event is handled carries no
``system`` prefix naming the connection (the node logs through
``twisted.logger`` with its own namespaces, so its lines are unchanged).
What does not: ``_doReadOrWrite`` still catches a protocol's exception,
logs it and drops that connection; an exception escaping it is logged and
the loop goes on to the next event, as ``callWithLogger`` did.

It also runs work *before it sleeps*, as the original's ``beforeSleep``:
:meth:`LeanEPollReactor.before_sleep` registers a call that runs once,
after the events of this turn were handled and the timed calls due ran,
before the reactor waits again.  ``output-flush turn`` sends the output of
a whole turn that way (disque.node.effects), without the timed-call
machinery a ``callLater(0)`` costs each turn.

``twistd disque`` switches Twisted's epoll reactor to this class (a
subclass with no state of its own) before the node starts
(:func:`lighten`).  A program embedding the node on its own reactor keeps
that reactor as it is, unless it calls :func:`lighten` itself.
``tests/protocol/test_reactor.py`` pins ``doPoll`` here to Twisted's: it fails when
Twisted's changes, so the copy is reviewed again.
"""

import errno

from twisted.python import log

try:
    from twisted.internet.epollreactor import EPollReactor
except ImportError:  # not Linux
    EPollReactor = None

__all__ = ["LeanEPollReactor", "lighten"]


if EPollReactor is not None:
    class LeanEPollReactor(EPollReactor):
        """``EPollReactor`` whose events are handled without a log context."""

        multiplexing_api = "epoll"  # INFO multiplexing_api, as for EPollReactor
        _before_sleep = None  # the calls to run before the next wait (a list), or None

        def before_sleep(self, f) -> None:
            """Call ``f()`` once before the reactor next waits for events:
            after the events of the current turn and the timed calls due
            (the original's ``beforeSleep``).  An exception is logged and
            the other calls still run."""
            pending = self._before_sleep
            if pending is None:
                self._before_sleep = [f]
            else:
                pending.append(f)

        def _run_before_sleep(self, pending, timeout):
            """Run ``pending`` (taken from ``_before_sleep``); return the
            timeout to wait with now: none if they registered more calls,
            no longer than the earliest timed call they scheduled."""
            for f in pending:
                try:
                    f()
                except KeyboardInterrupt:
                    raise
                except BaseException:
                    log.err()
            if self._before_sleep is not None:
                return 0
            sooner = self.timeout()
            if sooner is not None and (timeout is None or sooner < timeout):
                return sooner
            return timeout

        def doPoll(self, timeout):
            """Twisted's ``EPollReactor.doPoll``, but for ``callWithLogger``
            and with the calls of :meth:`before_sleep` run first."""
            pending = self._before_sleep
            if pending is not None:
                self._before_sleep = None
                timeout = self._run_before_sleep(pending, timeout)
            if timeout is None:
                timeout = -1  # Wait indefinitely.
            try:
                events = self._poller.poll(timeout, len(self._selectables))
            except OSError as err:
                if err.errno == errno.EINTR:
                    return
                raise
            handle = self._doReadOrWrite
            selectables = self._selectables
            for fd, event in events:
                selectable = selectables.get(fd)
                if selectable is not None:
                    try:
                        handle(selectable, fd, event)
                    except KeyboardInterrupt:
                        raise
                    except BaseException:
                        log.err()

        doIteration = doPoll
else:
    LeanEPollReactor = None


def lighten(reactor) -> bool:
    """Make ``reactor``, if it is exactly Twisted's ``EPollReactor``, a
    :class:`LeanEPollReactor`; True if it is one now."""
    if LeanEPollReactor is None:
        return False
    if type(reactor) is EPollReactor:
        reactor.__class__ = LeanEPollReactor
    return type(reactor) is LeanEPollReactor
