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

        def doPoll(self, timeout):
            """Twisted's ``EPollReactor.doPoll``, but for ``callWithLogger``."""
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
