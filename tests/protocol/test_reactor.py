"""disque.node.reactor: the epoll reactor without a log context per event.

A LeanEPollReactor instance of the test's own (not the global reactor)
serves loopback connections inside this process, iterated by hand."""

import inspect
import textwrap

import pytest
from twisted.internet import protocol
from twisted.internet.error import ConnectionDone
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.selectreactor import SelectReactor
from twisted.python import log
from twisted.python.failure import Failure

from disque.node.reactor import LeanEPollReactor, lighten

# Twisted's EPollReactor.doPoll as LeanEPollReactor.doPoll copies it (the
# docstring aside).  When Twisted changes it this test fails: read the new
# one, carry the change over to disque/node/reactor.py, then update this text.
TWISTED_DOPOLL = '''
def doPoll(self, timeout):
    if timeout is None:
        timeout = -1  # Wait indefinitely.

    try:
        # Limit the number of events to the number of io objects we're
        # currently tracking (because that's maybe a good heuristic) and
        # the amount of time we block to the value specified by our
        # caller.
        l = self._poller.poll(timeout, len(self._selectables))
    except OSError as err:
        if err.errno == errno.EINTR:
            return
        # See epoll_wait(2) for documentation on the other conditions
        # under which this can fail.  They can only be due to a serious
        # programming error on our part, so let's just announce them
        # loudly.
        raise

    _drdw = self._doReadOrWrite
    for fd, event in l:
        try:
            selectable = self._selectables[fd]
        except KeyError:
            pass
        else:
            log.callWithLogger(selectable, _drdw, selectable, fd, event)

doIteration = doPoll
'''


def _without_docstring(source):
    lines = textwrap.dedent(source).splitlines()
    out, in_doc = [], False
    for line in lines:
        if line.strip().startswith('"""'):
            in_doc = not (in_doc or line.strip().count('"""') == 2)
            continue
        if not in_doc:
            out.append(line)
    return "\n".join(out).strip()


def test_the_copy_matches_twisteds_doPoll():
    source = _without_docstring(inspect.getsource(EPollReactor.doPoll))
    expected = _without_docstring(TWISTED_DOPOLL).replace("\n\ndoIteration = doPoll", "")
    assert source == expected


def test_lighten_changes_exactly_twisteds_epoll_reactor():
    plain = EPollReactor()
    other = SelectReactor()
    try:
        assert lighten(plain) and type(plain) is LeanEPollReactor
        assert lighten(plain)  # again: nothing to do
        assert not lighten(other) and type(other) is SelectReactor
        assert plain.doIteration.__func__ is LeanEPollReactor.doPoll
    finally:
        for r in (plain, other):
            if getattr(r, "waker", None) is not None:
                r.waker.connectionLost(None)
            if hasattr(r, "_poller"):
                r._poller.close()


class Echo(protocol.Protocol):
    def dataReceived(self, data):
        if data == b"boom":
            raise RuntimeError("boom in dataReceived")
        self.transport.write(data)


class Collect(protocol.Protocol):
    def __init__(self):
        self.data = b""
        self.lost = False

    def dataReceived(self, data):
        self.data += data

    def connectionLost(self, reason):
        self.lost = True


@pytest.fixture
def lean():
    reactor = LeanEPollReactor()
    yield reactor
    for selectable in reactor.removeAll():  # every socket closed, the waker's too
        if selectable is not reactor.waker:
            selectable.connectionLost(Failure(ConnectionDone()))
    reactor.waker.connectionLost(None)
    reactor._poller.close()


def _connect(reactor, port):
    client = Collect()
    factory = protocol.ClientFactory()
    factory.buildProtocol = lambda addr: client
    reactor.connectTCP("127.0.0.1", port, factory)
    return client


def _iterate_until(reactor, predicate, turns=2000):
    for _ in range(turns):
        if predicate():
            return True
        reactor.iterate(0.01)
    return predicate()


def test_sockets_are_served_and_a_failing_protocol_loses_only_its_connection(lean):
    server = lean.listenTCP(0, protocol.Factory.forProtocol(Echo), interface="127.0.0.1")
    port = server.getHost().port
    good, bad = _connect(lean, port), _connect(lean, port)
    assert _iterate_until(lean, lambda: good.transport is not None and bad.transport is not None
                          and good.transport.connected and bad.transport.connected)
    events = []
    log.addObserver(events.append)
    try:
        good.transport.write(b"hello")
        bad.transport.write(b"boom")
        assert _iterate_until(lean, lambda: good.data == b"hello" and bad.lost)
    finally:
        log.removeObserver(events.append)
    # As with Twisted's reactor: the exception is logged, that connection
    # dropped, the others served on.
    failures = [e["failure"] for e in events if e.get("isError") and "failure" in e]
    assert [str(f.value) for f in failures] == ["boom in dataReceived"]
    good.transport.write(b" again")
    assert _iterate_until(lean, lambda: good.data == b"hello again")
    assert not good.lost
    server.stopListening()


def test_an_exception_escaping_the_handler_is_logged_and_the_loop_goes_on(lean, monkeypatch):
    """callWithLogger logged what escaped _doReadOrWrite and went on to the
    next event; so does the lean loop."""
    server = lean.listenTCP(0, protocol.Factory.forProtocol(Echo), interface="127.0.0.1")
    client = _connect(lean, server.getHost().port)
    assert _iterate_until(lean, lambda: client.transport is not None and client.transport.connected)
    handled, logged = [], []
    original = lean._doReadOrWrite

    def failing_once(selectable, fd, event):
        if not handled:
            handled.append(fd)
            raise ValueError("escaped")
        return original(selectable, fd, event)

    monkeypatch.setattr(lean, "_doReadOrWrite", failing_once)
    monkeypatch.setattr(log, "err", lambda *a, **k: logged.append(a))
    client.transport.write(b"ping")
    assert _iterate_until(lean, lambda: client.data == b"ping")
    assert handled and len(logged) == 1
    server.stopListening()


def test_keyboard_interrupt_is_not_swallowed(lean, monkeypatch):
    server = lean.listenTCP(0, protocol.Factory.forProtocol(Echo), interface="127.0.0.1")
    client = _connect(lean, server.getHost().port)
    assert _iterate_until(lean, lambda: client.transport is not None and client.transport.connected)

    def interrupt(selectable, fd, event):
        raise KeyboardInterrupt

    monkeypatch.setattr(lean, "_doReadOrWrite", interrupt)
    client.transport.write(b"x")
    with pytest.raises(KeyboardInterrupt):
        _iterate_until(lean, lambda: False, turns=200)
    server.stopListening()


class _Poller:
    """Stands for the epoll object: records each wait's timeout, no events."""

    def __init__(self):
        self.timeouts = []

    def poll(self, timeout, maxevents):
        self.timeouts.append(timeout)
        return []


def test_before_sleep_calls_run_once_before_the_next_wait(lean, monkeypatch):
    """The original's beforeSleep: what a turn registered runs before the
    reactor waits again, once; a call that registers another makes that
    wait not block; one that fails is logged and the others still run."""
    poller = _Poller()
    monkeypatch.setattr(lean, "_poller", poller)
    logged, ran = [], []
    monkeypatch.setattr(log, "err", lambda *a, **k: logged.append(a))
    lean.before_sleep(lambda: ran.append("first"))
    lean.before_sleep(lambda: 1 / 0)
    lean.before_sleep(lambda: (ran.append("third"), lean.before_sleep(lambda: ran.append("later"))))
    lean.doPoll(5.0)
    assert ran == ["first", "third"] and len(logged) == 1
    assert poller.timeouts == [0]  # a call is pending: the wait does not block
    lean.doPoll(5.0)
    assert ran == ["first", "third", "later"] and poller.timeouts == [0, 5.0]
    lean.doPoll(5.0)
    assert ran == ["first", "third", "later"] and poller.timeouts == [0, 5.0, 5.0]  # each ran once


def test_a_timed_call_scheduled_before_sleeping_shortens_the_wait(lean, monkeypatch):
    poller = _Poller()
    monkeypatch.setattr(lean, "_poller", poller)
    lean.before_sleep(lambda: lean.callLater(0.25, lambda: None))
    lean.doPoll(None)  # would wait for ever: the new timed call bounds it
    assert poller.timeouts and 0 < poller.timeouts[0] <= 0.25
