"""Both clients name why a node cannot be used, with the same class and
the node's address (issue 29): a server that does not speak RESP (a real
HTTP server, one that sends garbage, one that closes every connection, a
RESP server that is no Disque node), TLS that cannot connect (either side
without TLS, a certificate of another CA or for another name, no client
certificate), a refused AUTH, and every node failing for its own cause
(NoNodeAvailable lists each).  Real sockets on 127.0.0.1: the servers that
are not Disque nodes are written here (threads, or twisted.web), the
nodes are real processes.

The Twisted client must not leave Twisted's "Unhandled Error" (an
exception out of a protocol) nor "Unhandled error in Deferred" (a failed
Deferred nobody consumed, logged when it is garbage collected) in the log:
each Twisted test watches the global log publisher while it runs."""

import contextlib
import gc
import socket
import threading
import time

import pytest
from twisted.internet import task
from twisted.logger import formatEvent, globalLogPublisher

from disque.client import TLSOptions, errors
from disque.worker import Worker
from tests.support.process import TENANT_USERS, NodeProcess, free_port, wait_for
from tests.support.tx import KINDS, make_client, reactor, run

UNHANDLED = ("Unhandled Error", "Unhandled error in Deferred", "Traceback")


# -- servers that are no Disque node -------------------------------------------------

class FakeServer:
    """A TCP server on 127.0.0.1 that is no Disque node.  On each
    connection: ``greeting`` is sent at once; then every chunk the client
    sends is answered ``answer``; ``close_at_once`` closes the connection
    as soon as it is accepted.  It stops with its ``with`` block."""

    def __init__(self, greeting=b"", answer=b"", close_at_once=False):
        self.greeting, self.answer, self.close_at_once = greeting, answer, close_at_once
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                conn, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.close_at_once:
                conn.close()
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn):
        conn.settimeout(0.1)
        with conn:
            try:
                if self.greeting:
                    conn.sendall(self.greeting)
                while not self.stopped.is_set():
                    try:
                        data = conn.recv(4096)
                    except socket.timeout:
                        continue
                    if not data:
                        return
                    if self.answer:
                        conn.sendall(self.answer)
            except OSError:
                return

    def __enter__(self):
        return self.port

    def __exit__(self, *exc):
        self.stopped.set()
        self.listener.close()
        for t in self.threads:
            t.join(5)


@contextlib.contextmanager
def http_server():
    """A real HTTP server (twisted.web, on the tests' reactor): it answers
    a RESP command with ``HTTP/1.1 400 Bad Request``."""
    from twisted.web import resource, server

    listening = run(lambda: reactor().listenTCP(0, server.Site(resource.Resource()), interface="127.0.0.1"))
    try:
        yield listening.getHost().port
    finally:
        run(listening.stopListening)


def not_resp_server(kind):
    if kind == "http":
        return http_server()
    if kind == "garbage":
        return FakeServer(greeting=b"\x00\xff\xfegarbage\r\n")
    if kind == "closes":
        return FakeServer(close_at_once=True)
    return FakeServer(answer=b"+OK\r\n")  # "resp": RESP, but no Disque node


# -- the Twisted log ---------------------------------------------------------------

@pytest.fixture
def twisted_log():
    """The text of every event the global log publisher sees during the
    test (with the traceback of a failure)."""
    events = []

    def observe(event):
        text = formatEvent(event) or ""
        if event.get("log_failure") is not None:
            text += "\n" + event["log_failure"].getTraceback()
        events.append(text)

    globalLogPublisher.addObserver(observe)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(observe)


def assert_clean_log(events):
    """No unhandled error in what Twisted logged, once the reactor has run
    what is pending and the garbage is collected (a failed Deferred nobody
    consumed is logged when it is)."""
    for _ in range(3):
        run(lambda: task.deferLater(reactor(), 0, lambda: None))
        gc.collect()
    unhandled = [text for text in events if any(word in text for word in UNHANDLED)]
    assert not unhandled, "\n".join(unhandled)


def failure_of(kind, ports, twisted_log, **options):
    """The error a first call of a ``kind`` client on ``ports`` raises (and
    how long it took); the Twisted client's log is checked."""
    c = make_client(kind, ports, **options)
    started = time.monotonic()
    try:
        with pytest.raises(errors.DisqueError) as e:
            c.ping()
        return e.value, time.monotonic() - started
    finally:
        c.close()
        if kind == "twisted":
            assert_clean_log(twisted_log)


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def address(port):
    return "127.0.0.1:%d" % port


# -- not RESP ----------------------------------------------------------------------

@pytest.mark.parametrize("server, words", [
    ("http", "does not speak RESP (got b'HTTP/1.1 400 Bad Request"),
    ("garbage", "does not speak RESP (got b'\\x00\\xff\\xfegarbage\\r\\n')"),
    ("resp", "is not a Disque node (HELLO answered "),
])
def test_a_server_that_does_not_speak_resp(kind, server, words, twisted_log):
    with not_resp_server(server) as port:
        error, took = failure_of(kind, [port], twisted_log, failover_timeout=30)
    assert type(error) is errors.ProtocolMismatch, repr(error)
    assert error.address == address(port) and str(error) == "%s: %s" % (address(port), error.reason)
    assert words in str(error)
    assert took < 10  # a cause that lasts: no waiting for failover_timeout


def test_a_server_that_closes_every_connection(kind, twisted_log):
    with not_resp_server("closes") as port:
        error, took = failure_of(kind, [port], twisted_log, failover_timeout=1)
    assert type(error) is errors.ProtocolMismatch, repr(error)
    assert error.address == address(port)
    assert str(error) == "%s: does not speak RESP (it closed the connection before answering)" % address(port)
    # A proxy whose node is down does the same: it is tried until failover_timeout.
    assert took >= 0.9


# -- TLS ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tls_node(tmp_path_factory):
    """A node serving a plain port (``node.port``) and a TLS port
    (``node.tls_port``), and the PKI of tests.support.tls (``node.pki``)."""
    from tests.support.tls import make_pki, node_directives

    pki = make_pki(tmp_path_factory.mktemp("pki"))
    tls_port = free_port()
    args = [a for k, v in node_directives(pki, **{"tls-port": tls_port}).items() for a in ("--set", "%s=%s" % (k, v))]
    node = NodeProcess(tmp_path_factory.mktemp("tls-node"), args=args).start()
    node.tls_port, node.pki = tls_port, pki
    yield node
    node.stop()


@pytest.mark.parametrize("case, words", [
    ("tls to a plain port", "TLS: the node does not serve TLS (it answers plain RESP)"),
    ("plain to the TLS port", "TLS: the node serves TLS, and the client connects without it"),
    ("another CA", "TLS: certificate verify failed"),
    ("another name", "TLS: certificate verify failed"),
    ("no client certificate", "TLS: tlsv13 alert certificate required"),
])
def test_tls_that_cannot_connect(kind, tls_node, case, words, twisted_log):
    pki = tls_node.pki
    port, tls = tls_node.tls_port, TLSOptions(pki.ca, pki.client, pki.client_key)
    if case == "tls to a plain port":
        port = tls_node.port
    elif case == "plain to the TLS port":
        tls = None
    elif case == "another CA":
        tls = TLSOptions(pki.other_ca, pki.client, pki.client_key)
    elif case == "another name":
        tls = TLSOptions(pki.ca, pki.client, pki.client_key, server_name="wrong.example")
    elif case == "no client certificate":
        tls = TLSOptions(pki.ca)
    error, took = failure_of(kind, [port], twisted_log, tls=tls, connect_timeout=1, failover_timeout=30)
    assert type(error) is errors.TLSError, repr(error)
    assert error.address == address(port) and str(error).startswith(address(port) + ": ")
    assert words in str(error)
    if case == "another name":
        assert "wrong.example" in str(error)
    assert took < 10  # it lasts: no waiting for failover_timeout


# -- AUTH --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def locked_node(tmp_path_factory):
    """A node with a password for the default user, and alice's user."""
    workdir = tmp_path_factory.mktemp("locked")
    config = workdir / "users.conf"
    config.write_text("".join(line + "\n" for line in TENANT_USERS))
    node = NodeProcess(workdir, config=str(config), args=["--requirepass", "s3cret"]).start()
    yield node
    node.stop()


@pytest.mark.parametrize("credentials, words", [
    ({"password": "wrong"}, "AUTH failed on node {}: "),
    ({}, "node {} requires a password (set the 'password' option): NOAUTH"),
    ({"username": "carol", "password": "alicepw"}, "AUTH failed on node {}: WRONGPASS"),
])
def test_a_refused_auth(kind, locked_node, credentials, words, twisted_log):
    error, took = failure_of(kind, [locked_node], twisted_log, failover_timeout=30, **credentials)
    assert type(error) is errors.AuthError, repr(error)
    assert error.address == address(locked_node.port)
    assert words.format(address(locked_node.port)) in str(error)
    assert error.code in ("ERR", "WRONGPASS", "NOAUTH") and error.message in str(error)  # the node's words
    assert took < 10


# -- every node failing ------------------------------------------------------------

def test_no_node_available_names_each_node_and_its_cause(kind, twisted_log):
    refused = free_port()  # nothing listens there
    with http_server() as http, FakeServer() as silent:
        error, took = failure_of(kind, [http, refused, silent], twisted_log,
                                 failover_timeout=2, reply_timeout=0.5)
    assert type(error) is errors.NoNodeAvailable, repr(error)
    assert took >= 1.9  # refused and silent may not last: tried until failover_timeout
    text = str(error)
    assert text.startswith("no node available: ")
    assert "%s (does not speak RESP (got b'HTTP/1.1 400" % address(http) in text
    assert "%s (connection refused)" % address(refused) in text
    assert "%s (no reply within 0.5 s)" % address(silent) in text
    assert {a: type(e) for a, e in error.errors.items()} == {
        address(http): errors.ProtocolMismatch, address(refused): errors.ConnectionError,
        address(silent): errors.ConnectionError}


def test_every_node_failing_for_a_lasting_cause_fails_at_once(kind, twisted_log):
    with http_server() as http, not_resp_server("garbage") as garbage:
        error, took = failure_of(kind, [http, garbage], twisted_log, failover_timeout=30)
    assert type(error) is errors.NoNodeAvailable and took < 10
    assert set(error.errors) == {address(http), address(garbage)}
    assert all(type(e) is errors.ProtocolMismatch for e in error.errors.values())


def test_a_seed_that_does_not_speak_resp_is_passed_over(kind, tls_node, twisted_log):
    """The seeds are tried in random order: clients are made until one
    tried the HTTP server first (each has 1 chance in 2)."""
    tried_http_first = 0
    with http_server() as http:
        for _ in range(20):
            c = make_client(kind, [http, tls_node.port], failover_timeout=30)
            try:
                assert c.ping() == "PONG" and c.node_address == ("127.0.0.1", tls_node.port)
                if ("127.0.0.1", http) in c.topology.errors:
                    tried_http_first += 1
                    assert type(c.topology.errors[("127.0.0.1", http)]) is errors.ProtocolMismatch
                    break
            finally:
                c.close()
    assert tried_http_first
    if kind == "twisted":
        assert_clean_log(twisted_log)


# -- the worker --------------------------------------------------------------------

def test_the_worker_logs_the_cause_in_one_line(twisted_log):
    with http_server() as http:
        worker = Worker(lambda job: None, ["q"], nodes=[("127.0.0.1", http)], reactor=reactor())
        run(worker.startService)
        try:
            wait_for(lambda: any("GETJOB failed" in t for t in list(twisted_log)), timeout=20,
                     what="the worker's GETJOB failing")
        finally:
            run(worker.stopService)
    line = next(t for t in list(twisted_log) if "GETJOB failed" in t)
    assert "%s: does not speak RESP (got b'HTTP/1.1 400" % address(http) in line and "\n" not in line
    assert_clean_log(twisted_log)
