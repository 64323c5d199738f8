"""DisqueClient's decisions in memory, step by step on a fake clock:
choice by priority, failover and backoff, NoNodeAvailable, -LEAVING, the
watchdog for a node that stops answering, retiring a node only once its
replies are in, the consumer rule, AUTH (with a username, on every
connection failover opens; what the protocol sends first), -NOPERM.  The
nodes are fakes that answer from a script; the same behaviours on real
nodes: test_e2e_client.py."""

import pytest
import txredisapi
from twisted.internet import defer, task
from twisted.internet.testing import StringTransport

from disque.client import errors
from disque.client.txclient import DisqueClient, _Conn, _Node
from tests.support.deferreds import assertNoResult, failureResultOf, successResultOf


def node_id(letter):
    return letter * 40


class FakeNode:
    """A node at 127.0.0.<n>:7711.  ``up`` decides whether it accepts
    connections; ``answer(args)`` gives a reply, a Deferred, or raises."""

    def __init__(self, cluster, letter, n, priority=1):
        self.cluster, self.letter, self.n, self.priority = cluster, letter, n, priority
        self.id = node_id(letter)
        self.address = ("127.0.0.%d" % n, 7711)
        self.up = True
        self.hold = False           # accept calls, never answer
        self.leaving = False
        self.auth_fails = False
        self.logins = []            # (username, password) each connection logged in with
        self.noperm = ()            # commands answered -NOPERM
        self.calls = []
        self.jobs_from = None       # GETJOB answers jobs created on this node letter
        self.conns = []

    def answer(self, args):
        self.calls.append(tuple(args))
        if self.hold:
            return defer.Deferred()
        name = args[0]
        if name in self.noperm:
            raise txredisapi.ResponseError("NOPERM User alice has no permissions to run the '%s' command"
                                           % name.lower())
        if name == "HELLO":
            return [1, self.id.encode()] + [
                [n.id.encode(), n.address[0].encode(), b"7711", str(n.priority).encode()]
                for n in self.cluster.values()]
        if self.leaving and name == "GETJOB":
            raise txredisapi.ResponseError("LEAVING This node is leaving the cluster, please connect to a different one")
        if name == "GETJOB":
            origin = self.jobs_from or self.letter
            return [[b"q", ("D-%s-%024d-0001" % (origin * 8, len(self.calls))).encode(), b"body",
                     b"nacks", 0, b"additional-deliveries", 0]]
        if name == "ADDJOB":
            return ("D-%s-aaaaaaaaaaaaaaaaaaaaaaaa-0001" % (self.letter * 8)).encode()
        return 0


class FakeFactory:
    """What _Conn reads of txredisapi's RedisFactory."""

    def __init__(self, node):
        self.node = node
        self.size = 1
        self.disconnectCalled = False
        self.pending = []
        self.handler = self

    def execute_command(self, *args):
        if self.size == 0:
            return defer.fail(txredisapi.ConnectionError("Not connected"))
        if not self.node.up:
            return defer.fail(txredisapi.ConnectionError("Lost connection"))
        try:
            reply = self.node.answer(args)
        except txredisapi.ResponseError as e:
            return defer.fail(e)
        if isinstance(reply, defer.Deferred):
            self.pending.append(reply)
            return reply
        return defer.succeed(reply)

    def disconnect(self):
        self.size, self.disconnectCalled = 0, True
        pending, self.pending = self.pending, []
        for d in pending:
            if not d.called:
                d.errback(txredisapi.ConnectionError("Lost connection"))
        return defer.succeed(None)


class FakeClient(DisqueClient):
    def __init__(self, cluster, seeds, **kw):
        self.cluster = cluster
        self.by_address = {n.address: n for n in cluster.values()}
        super().__init__(seeds, reactor=task.Clock(), **kw)

    connects = 0

    def _dial(self, factory, node):
        """The connection the client's own factory would make: the node
        records what the factory's protocol logs in with."""
        self.connects += 1
        fake = self.by_address.get(node.address)
        if fake is None or not fake.up:
            return defer.fail(txredisapi.ConnectionError("could not connect: refused"))
        fake.logins.append((factory.username, factory.password))
        if fake.auth_fails:
            return defer.fail(errors.AuthError("AUTH failed on %s:%d: invalid password" % node.address))
        factory = FakeFactory(fake)
        fake.conns.append(factory)
        return defer.succeed(_Conn(factory))


def cluster(*specs):
    out = {}
    for i, (letter, priority) in enumerate(specs):
        out[letter] = FakeNode(out, letter, i + 1, priority)
    return out


def test_connects_to_a_seed_learns_the_cluster_and_stays():
    c = cluster(("a", 1), ("b", 1), ("c", 100))
    client = FakeClient(c, ["127.0.0.3:7711"])  # the leaving node is the only seed
    assert successResultOf(client.qlen("q")) == 0
    assert client.node_id == node_id("c")  # the seed answered: the client stays while it works
    assert sorted(client.topology.nodes) == [node_id(x) for x in "abc"]
    c["c"].up = False  # its node dies: the next node is a healthy one, never the leaving one
    for conn in c["c"].conns:
        conn.disconnect()
    assert successResultOf(client.qlen("q")) == 0 and client.node_id in (node_id("a"), node_id("b"))


def test_failover_backoff_and_no_node_available():
    c = cluster(("a", 1), ("b", 1))
    client = FakeClient(c, ["127.0.0.1:7711"], failover_timeout=3.0)
    successResultOf(client.connect())
    first = client.node_id
    for n in c.values():
        n.up = False
        for conn in n.conns:
            conn.disconnect()
    d = client.add_job("q", "x")
    assertNoResult(d)  # both nodes backing off: the call waits
    for n in c.values():
        n.up = True  # back before failover_timeout: the call runs
    client.reactor.advance(0.2)
    assert d.called and successResultOf(d).startswith("D-") and client.node_id is not None
    # Now down for good: NoNodeAvailable after failover_timeout, not before.
    for n in c.values():
        n.up = False
        for conn in n.conns:
            conn.disconnect()
    d = client.qlen("q")
    for _ in range(29):
        client.reactor.advance(0.1)
    assertNoResult(d)
    client.reactor.advance(0.2)
    with pytest.raises(errors.NoNodeAvailable, match="127.0.0.1:7711.*127.0.0.2:7711"):
        failureResultOf(d, errors.NoNodeAvailable).raiseException()
    assert first in (node_id("a"), node_id("b"))


def test_backoff_doubles_for_a_node_that_keeps_failing():
    c = cluster(("a", 1))
    client = FakeClient(c, ["127.0.0.1:7711"], failover_timeout=100)
    c["a"].up = False
    d = client.qlen("q")
    for _ in range(600):  # 6 s: tries at about 0, 0.1, 0.3, 0.7, 1.5, 3.1 s (+-25%)
        client.reactor.advance(0.01)
    assert 5 <= client.connects <= 8  # a fixed 0.1 s backoff would make 60
    c["a"].up = True
    client.reactor.advance(6)
    assert successResultOf(d) == 0
    assert ("127.0.0.1", 7711) not in client.topology._failures  # a success clears the backoff


def test_leaving_moves_the_call_and_ranks_the_node():
    c = cluster(("a", 1), ("b", 1))
    client = FakeClient(c, ["127.0.0.1:7711"])
    successResultOf(client.connect())
    assert client.node_id == node_id("a")
    c["a"].leaving = True
    jobs = successResultOf(client.get_jobs("q", timeout=100))
    assert client.node_id == node_id("b") and jobs[0].node == node_id("b")
    assert client.topology.priority(node_id("a")) == 100


def test_watchdog_leaves_a_node_that_stops_answering():
    c = cluster(("a", 1), ("b", 1))
    client = FakeClient(c, ["127.0.0.1:7711"], reply_timeout=2.0)
    successResultOf(client.connect())
    c["a"].hold = True  # SIGSTOPped: accepts, never answers
    d = client.qlen("q")  # the fast path: no timer of its own
    client.reactor.advance(2.0)
    assertNoResult(d)
    client.reactor.advance(0.6)  # the next sweep past reply_timeout closes the connection
    assert successResultOf(d) == 0 and client.node_id == node_id("b")


def test_a_retired_node_keeps_its_connection_until_its_replies_are_in():
    c = cluster(("a", 1), ("b", 1))
    client = FakeClient(c, ["127.0.0.1:7711"], switch_window=4)
    successResultOf(client.connect())
    c["a"].hold = True
    pending = client.add_job("q", "x")  # sent to A, no reply yet
    c["a"].hold = False
    c["a"].jobs_from = "b"  # every job A delivers was created on B
    for _ in range(4):
        successResultOf(client.get_jobs("q", timeout=100))
    assert client.switches == 1 and client._current is None  # A retired; B is the target
    factory = c["a"].conns[0]
    assert factory.size == 1  # A still owes a reply: its connection stays open
    factory.pending[0].callback(b"D-aaaaaaaa-aaaaaaaaaaaaaaaaaaaaaaaa-0001")
    assert successResultOf(pending).startswith("D-aaaaaaaa") and factory.size == 0  # then it closes
    assert successResultOf(client.qlen("q")) == 0 and client.node_id == node_id("b")


def test_auth_error_is_not_retried():
    c = cluster(("a", 1), ("b", 1))
    c["a"].auth_fails = c["b"].auth_fails = True
    client = FakeClient(c, ["127.0.0.1:7711", "127.0.0.2:7711"])
    with pytest.raises(errors.AuthError):
        failureResultOf(client.qlen("q"), errors.AuthError).raiseException()
    assert len(c["a"].conns) + len(c["b"].conns) == 0


def test_every_connection_logs_in_with_the_username_failover_too():
    c = cluster(("a", 1), ("b", 1))
    client = FakeClient(c, ["127.0.0.1:7711"], username="alice", password="alicepw")
    assert successResultOf(client.qlen("q")) == 0 and client.node_id == node_id("a")
    successResultOf(client.get_jobs("q", timeout=100))  # a blocking call: a connection of its own
    c["a"].up = False
    for conn in c["a"].conns:
        conn.disconnect()
    assert successResultOf(client.qlen("q")) == 0 and client.node_id == node_id("b")
    assert c["a"].logins == [("alice", "alicepw")] * 2 and c["b"].logins == [("alice", "alicepw")]
    # Without a username: the default user's AUTH <password>, or no AUTH.
    for kwargs, login in (({"password": "pw"}, (None, "pw")), ({}, (None, None)),
                          ({"username": "nopassuser"}, ("nopassuser", ""))):
        c = cluster(("a", 1))
        assert successResultOf(FakeClient(c, ["127.0.0.1:7711"], **kwargs).qlen("q")) == 0
        assert c["a"].logins == [login]


@pytest.mark.parametrize("kwargs, sent", [
    ({"username": "alice", "password": "alicepw"}, b"*3\r\n$4\r\nAUTH\r\n$5\r\nalice\r\n$7\r\nalicepw\r\n"),
    ({"password": "pw"}, b"*2\r\n$4\r\nAUTH\r\n$2\r\npw\r\n"),
    ({}, b""),
])
def test_the_connection_protocol_sends_auth_first(kwargs, sent):
    client = DisqueClient(["127.0.0.1:7711"], reactor=task.Clock(), **kwargs)
    protocol = client._factory(_Node("127.0.0.1", 7711)).buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    assert transport.value() == sent


def test_a_refused_pair_is_an_auth_error_not_retried():
    c = cluster(("a", 1), ("b", 1))
    c["a"].auth_fails = c["b"].auth_fails = True
    client = FakeClient(c, ["127.0.0.1:7711", "127.0.0.2:7711"], username="alice", password="nope")
    with pytest.raises(errors.AuthError):
        failureResultOf(client.qlen("q"), errors.AuthError).raiseException()
    assert len(c["a"].logins) + len(c["b"].logins) == 1


def test_noperm_is_raised_at_once_never_failed_over():
    c = cluster(("a", 1), ("b", 1))
    c["a"].noperm = c["b"].noperm = ("ACKJOB",)
    client = FakeClient(c, ["127.0.0.1:7711"], username="alice", password="alicepw")
    assert successResultOf(client.qlen("q")) == 0
    with pytest.raises(errors.NoPermission, match="no permissions to run the 'ackjob' command"):
        failureResultOf(client.ack("D-bbbbbbbb-aaaaaaaaaaaaaaaaaaaaaaaa-0001"), errors.NoPermission).raiseException()
    assert client.node_id == node_id("a") and c["b"].calls == []  # the client stays where it was
    # HELLO refused: the user cannot use the cluster; raised, not retried
    # on every node until failover_timeout.
    c = cluster(("a", 1), ("b", 1))
    c["a"].noperm = c["b"].noperm = ("HELLO",)
    client = FakeClient(c, ["127.0.0.1:7711", "127.0.0.2:7711"], username="alice", password="alicepw")
    with pytest.raises(errors.NoPermission):
        failureResultOf(client.qlen("q"), errors.NoPermission).raiseException()
    assert client.connects == 1


def test_prefer_sends_job_commands_to_the_delivering_node():
    c = cluster(("a", 1), ("b", 1))
    client = FakeClient(c, ["127.0.0.1:7711"], switch_window=None)
    successResultOf(client.connect())
    [job] = successResultOf(client.get_jobs("q", timeout=100))
    assert job.node == node_id("a")
    client._target = ("127.0.0.2", 7711)
    client._retire(client._current)
    assert successResultOf(client.qlen("q")) == 0 and client.node_id == node_id("b")
    # A retired node is not preferred: the ACK goes to the current node.
    successResultOf(client.ack(job))
    assert ("ACKJOB", job.id) in c["b"].calls
