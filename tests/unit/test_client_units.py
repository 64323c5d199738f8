"""The clients' shared parts without a node: the command lines each method
builds, the reply shapes, the error classes, the node choice and the
consumer rule (disque/client/commands.py, errors.py, nodes.py), and the
AUTH the blocking client logs in with on every connection, failover
included (credentials.py, connection.py, over fake sockets)."""

import random

import hiredis
import pytest
from hypothesis import given, settings, strategies as st

from disque.client import BlockingClient, connection, errors
from disque.client.commands import Call, Commands, pairs, parse_hello, parse_jobs
from disque.client.credentials import auth_args, login
from disque.client.job import Hello, Job, NodeInfo, id_prefix
from disque.client.nodes import OriginTracker, Topology, as_address, parse_address
from disque.resp import reply


class Recorder(Commands):
    """Commands whose ``_run`` returns the Call instead of running it."""

    def _run(self, call):
        return call


C = Recorder()
JOB_ID = "D-5f3a1c2e-Xq1vJ3mE0M9GJ4dpT7wGUe6R-05a1"


# -- command lines -----------------------------------------------------------------

def test_add_job_arguments():
    assert C.add_job("q", b"body").args == ["ADDJOB", "q", b"body", 0]
    call = C.add_job("q", "b", timeout=100, replicate=3, delay=5, retry=10, ttl=60, maxlen=7,
                     async_=True, dedup="k1")
    assert call.args == ["ADDJOB", "q", "b", 100, "REPLICATE", 3, "DELAY", 5, "RETRY", 10, "TTL", 60,
                         "MAXLEN", 7, "ASYNC", "DEDUP", "k1"]
    assert not call.blocking  # answered at once or after replication: pipelined


def test_add_job_extension_arguments():
    call = C.add_job("q", b"b", priority=9, backoff=500, max_deliveries=3, deadletter="q-dead")
    assert call.args == ["ADDJOB", "q", b"b", 0, "PRIORITY", 9, "BACKOFF", "FIXED", 500,
                         "MAXDELIVERIES", 3, "DEADLETTER", "q-dead"]
    # After the original options, in a fixed order; a pair is BACKOFF EXP.
    call = C.add_job("q", b"b", 10, retry=5, dedup="k", priority=1, backoff=(100, 60000), max_deliveries=1)
    assert call.args == ["ADDJOB", "q", b"b", 10, "RETRY", 5, "DEDUP", "k", "PRIORITY", 1,
                         "BACKOFF", "EXP", 100, 60000, "MAXDELIVERIES", 1]
    assert C.add_job("q", b"b", backoff=[7, 7]).args[-4:] == ["BACKOFF", "EXP", 7, 7]
    assert C.add_job("q", b"b", priority=5.0).args[-2:] == ["PRIORITY", 5]
    # DEADLETTER alone goes to the node, which refuses it unless it has a default.
    assert C.add_job("q", b"b", deadletter=b"d").args[-2:] == ["DEADLETTER", b"d"]
    assert C.add_job("q", b"b").args == ["ADDJOB", "q", b"b", 0]  # nothing when not asked


@pytest.mark.parametrize("kwargs, error, message", [
    ({"priority": 0}, ValueError, "priority must be between 1 and 9, got 0"),
    ({"priority": 10}, ValueError, "between 1 and 9"),
    ({"priority": "9"}, TypeError, "priority must be an integer"),
    ({"priority": True}, TypeError, "priority must be an integer"),
    ({"priority": 2.5}, TypeError, "priority must be an integer"),
    ({"backoff": 0}, ValueError, "backoff must be between 1 and"),
    ({"backoff": 1 << 32}, ValueError, "backoff must be between 1 and 4294967295"),
    ({"backoff": (100, 50)}, ValueError, "below its base"),
    ({"backoff": (0, 50)}, ValueError, "backoff base must be between"),
    ({"backoff": (1, 2, 3)}, TypeError, "(base_ms, max_ms) pair"),
    ({"backoff": "500"}, TypeError, "backoff must be an integer"),
    ({"max_deliveries": 0}, ValueError, "max_deliveries must be between 1 and"),
    ({"max_deliveries": -1}, ValueError, "max_deliveries"),
    ({"deadletter": ""}, ValueError, "deadletter must name a queue other than the job's own"),
    ({"deadletter": b"q"}, ValueError, "deadletter must name a queue other than the job's own"),
])
def test_add_job_extension_arguments_are_checked_before_sending(kwargs, error, message):
    with pytest.raises(error) as e:
        C.add_job("q", b"b", **kwargs)
    assert message in str(e.value)


def test_revive_sends_every_id_and_reads_nulls():
    job = Job("q:dead", JOB_ID, b"x", 0, 0, node="n" * 40)
    call = C.revive(job, "D-other")
    assert call.args == ["REVIVE", JOB_ID, "D-other"] and call.prefer == "n" * 40
    assert call.parse([b"D-new", None], "n" * 40) == ["D-new", None]


def test_qlimit_calls_and_replies():
    assert C.set_qlimit("q", rate=50).args == ["QLIMIT", "q", "RATE", "50"]
    assert C.set_qlimit("q", rate=2.5, burst=3, concurrency=4).args == \
        ["QLIMIT", "q", "RATE", "2.5", "BURST", 3, "CONCURRENCY", 4]
    assert C.set_qlimit("q", concurrency=1).parse(b"OK", None) is True
    assert C.clear_qlimit("q").args == ["QLIMIT", "q", "NONE"]
    for kwargs, error in (({}, TypeError), ({"burst": 3}, TypeError), ({"rate": 0}, ValueError),
                          ({"rate": "5"}, ValueError), ({"concurrency": 0}, ValueError),
                          ({"rate": 1, "burst": 1.5}, TypeError)):
        with pytest.raises(error):
            C.set_qlimit("q", **kwargs)
    shown = C.qlimit("q").parse([b"rate", b"2.5", b"burst", 2, b"concurrency", 0, b"rate-here", b"1", b"held", 3],
                                None)
    assert shown == {"rate": 2.5, "burst": 2, "concurrency": 0, "rate-here": 1.0, "held": 3}
    assert C.qlimit("q").parse([], None) == {}


def test_nack_with_a_delay():
    job = Job("q", JOB_ID, b"x", 0, 0, node="n" * 40)
    call = C.nack(job, "D-other", delay=1500)
    assert call.args == ["NACK", JOB_ID, "D-other", "DELAY", 1500] and call.prefer == "n" * 40
    assert C.nack(job, delay=0).args == ["NACK", JOB_ID, "DELAY", 0]
    assert C.nack(job).args == ["NACK", JOB_ID]
    with pytest.raises(ValueError, match="delay must be between 0 and"):
        C.nack(job, delay=-1)
    assert C.nack(job, delay=10 ** 15).args[-1] == 10 ** 15  # the node takes up to ~2^61 ms
    with pytest.raises(ValueError, match="delay must be between 0 and"):
        C.nack(job, delay=1 << 61)
    with pytest.raises(TypeError, match="delay must be an integer"):
        C.nack(job, delay="1s")
    with pytest.raises(TypeError):
        C.nack(delay=10)


def test_get_jobs_arguments_and_blocking():
    call = C.get_jobs("a", "b")
    assert call.args == ["GETJOB", "WITHCOUNTERS", "FROM", "a", "b"] and call.blocking
    call = C.get_jobs("a", count=5, timeout=200, with_counters=False)
    assert call.args == ["GETJOB", "TIMEOUT", 200, "COUNT", 5, "FROM", "a"]
    call = C.get_jobs("a", nohang=True)
    assert call.args == ["GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", "a"] and not call.blocking
    with pytest.raises(TypeError):
        C.get_jobs()


def test_job_commands_prefer_the_delivering_node():
    job = Job("q", JOB_ID, b"x", 0, 0, node="n" * 40)
    for method, name in ((C.ack, "ACKJOB"), (C.fast_ack, "FASTACK"), (C.nack, "NACK"), (C.enqueue, "ENQUEUE"),
                         (C.dequeue, "DEQUEUE"), (C.del_job, "DELJOB")):
        call = method(job, "D-other")
        assert call.args == [name, JOB_ID, "D-other"] and call.prefer == "n" * 40
        assert method(b"D-x").args == [name, "D-x"] and method(b"D-x").prefer is None
        with pytest.raises(TypeError):
            method()
    assert C.working(job).args == ["WORKING", JOB_ID] and C.working(job).prefer == "n" * 40
    assert C.show(JOB_ID).args == ["SHOW", JOB_ID]


def test_queue_and_scan_arguments():
    assert C.qlen("q").args == ["QLEN", "q"]
    assert C.qstat("q").args == ["QSTAT", "q"]
    assert C.qpeek("q", -3).args == ["QPEEK", "q", -3]
    assert C.pause("q", "in", "bcast").args == ["PAUSE", "q", "in", "bcast"]
    with pytest.raises(TypeError):
        C.pause("q")
    call = C.qscan_page(5, count=10, busyloop=True, minlen=1, maxlen=9, importrate=2, node="N")
    assert call.args == ["QSCAN", 5, "COUNT", 10, "BUSYLOOP", "MINLEN", 1, "MAXLEN", 9, "IMPORTRATE", 2]
    assert call.pin == "N"
    call = C.jscan_page(queues=["a", "b"], states=["queued"], reply="all")
    assert call.args == ["JSCAN", 0, "QUEUE", "a", "QUEUE", "b", "STATE", "queued", "REPLY", "all"]
    assert C.info().args == ["INFO"] and C.info("jobs").args == ["INFO", "jobs"]


def test_reply_timeout_covers_the_wait_asked_for():
    assert C.qlen("q").reply_timeout(10) == 10
    assert C.get_jobs("q", timeout=1500).reply_timeout(10) == 11.5
    assert C.get_jobs("q").reply_timeout(10) is None  # may wait forever, as GETJOB does
    assert C.get_jobs("q", timeout=0).reply_timeout(10) is None


# -- replies -----------------------------------------------------------------------

def test_parse_jobs_with_and_without_counters():
    reply = [[b"q", JOB_ID.encode(), b"\x00body", b"nacks", 2, b"additional-deliveries", 3],
             [b"q2", b"D-00000000-aaaaaaaaaaaaaaaaaaaaaaaa-0001", b""]]
    jobs = parse_jobs(reply, "node1")
    assert jobs[0] == Job("q", JOB_ID, b"\x00body") and jobs[0].nacks == 2
    assert jobs[0].additional_deliveries == 3 and jobs[0].deliveries == 5 and jobs[0].node == "node1"
    assert jobs[0].origin == "5f3a1c2e" == id_prefix(JOB_ID)
    assert jobs[1].nacks is None and jobs[1].deliveries is None and jobs[1].body == b""
    assert parse_jobs(None, "n") == [] and parse_jobs([], "n") == []


def test_pairs_types():
    reply = [b"id", JOB_ID.encode(), b"repl", 3, b"ttl", b"86400", b"nodes-delivered", [b"a", b"b"],
             b"body", b"123", b"pause", b"none", b"offset", b"-5"]
    out = pairs(reply)
    assert out == {"id": JOB_ID, "repl": 3, "ttl": 86400, "nodes-delivered": ["a", "b"], "body": b"123",
                   "pause": "none", "offset": -5}
    assert pairs(None) is None
    # SHOW's fields of the extensions: a list of integers stays integers.
    ext = pairs([b"priority", 9, b"backoff", [b"500", b"60000"], b"dead-letter", b"q:dead", b"redeliver-at", 17])
    assert ext == {"priority": 9, "backoff": [500, 60000], "dead-letter": "q:dead", "redeliver-at": 17}


def test_parse_hello_fills_an_empty_host():
    reply = [1, b"A" * 40, [b"A" * 40, b"", b"7711", b"1"], [b"B" * 40, b"10.0.0.2", b"7712", b"100"]]
    hello = parse_hello(reply, host="10.0.0.1")
    assert hello == Hello(1, "A" * 40, (NodeInfo("A" * 40, "10.0.0.1", 7711, 1),
                                         NodeInfo("B" * 40, "10.0.0.2", 7712, 100)))
    assert hello.nodes[1].address == "10.0.0.2:7712"


# -- errors ------------------------------------------------------------------------

@pytest.mark.parametrize("line, cls", [
    ("NOJOB Job not known in the context of this node.", errors.NoJob),
    ("NOREPL Timeout reached before replicating to the requested number of nodes", errors.NoReplication),
    ("PAUSED Queue paused in input, try later", errors.Paused),
    ("LEAVING This node is leaving the cluster, please connect to a different one", errors.Leaving),
    ("TOOLATE Half of job TTL already elapsed", errors.TooLate),
    ("NOAUTH Authentication required.", errors.AuthError),
    ("ERR invalid password", errors.AuthError),
    ("WRONGPASS invalid username-password pair or user is disabled.", errors.AuthError),
    ("NOPERM User alice has no permissions to run the 'debug' command", errors.NoPermission),
    ("NOPERM No permissions to access a queue", errors.NoPermission),
    ("NOPERM No permissions to access a job", errors.NoPermission),
    ("OOM command not allowed", errors.OutOfMemory),
    ("MAXLEN Queue is already longer than the specified MAXLEN count", errors.MaxLen),
    ("BADID Invalid Job ID format.", errors.BadId),
    ("ERR unknown command 'FOO'", errors.ResponseError),
    ("SOMETHINGNEW later", errors.ResponseError),
])
def test_error_classes(line, cls):
    error = errors.from_reply(line.encode())
    assert type(error) is cls and isinstance(error, errors.DisqueError)
    assert str(error) == line and error.code == line.split()[0]
    assert error.message == line.partition(" ")[2]


# -- node choice -------------------------------------------------------------------

def _hello(*nodes):
    return Hello(1, nodes[0][0], tuple(NodeInfo(i, "127.0.0.%d" % n, 7711, p) for i, n, p in nodes))


def test_addresses():
    assert parse_address("10.0.0.1:7000") == ("10.0.0.1", 7000)
    assert parse_address("example.org") == ("example.org", 7711)
    assert parse_address("7712") == ("127.0.0.1", 7712)
    assert parse_address("[::1]:7713") == ("::1", 7713)
    assert as_address(("h", "5")) == ("h", 5) and as_address(7714) == ("127.0.0.1", 7714)


def test_topology_prefers_low_priority_and_puts_unknown_seeds_last():
    t = Topology([("127.0.0.9", 7711), ("127.0.0.1", 7711)], rng=random.Random(1))
    assert [c.address for c in t.candidates(0)] == [("127.0.0.9", 7711), ("127.0.0.1", 7711)]
    t.learn(_hello(("a", 1, 1), ("b", 2, 100), ("c", 3, 10)))
    order = [c.id for c in t.candidates(0)]
    assert order == ["a", "c", "b", None]  # the seed no HELLO named comes last
    t.mark_leaving("a")
    assert [c.id for c in t.candidates(0)][:2] == ["c", "a"]
    t.learn(Hello(1, "c", _hello(("a", 1, 1), ("b", 2, 100), ("c", 3, 10)).nodes))
    assert t.priority("a") == 100  # another node's HELLO has not heard yet: still leaving
    t.learn(_hello(("a", 1, 1), ("b", 2, 100)))
    assert t.priority("a") == 1  # its own HELLO says it stays
    assert t.by_prefix("b") == NodeInfo("b", "127.0.0.2", 7711, 100)


def test_topology_ties_are_random():
    seen = set()
    for seed in range(20):
        t = Topology([("127.0.0.1", 7711)], rng=random.Random(seed))
        t.learn(_hello(("a", 1, 1), ("b", 2, 1), ("c", 3, 1)))
        seen.add(t.candidates(0)[0].id)
    assert seen == {"a", "b", "c"}


def test_topology_backoff_doubles_and_success_clears():
    t = Topology([("h", 1)], backoff_initial=0.1, backoff_max=1.0, rng=random.Random(0))
    delays = []
    for _ in range(6):
        until = t.failed(("h", 1), 100.0, "refused")
        delays.append(until - 100.0)
        assert t.candidates(until - 1e-9) == [] and t.next_retry(100.0) == until
        assert [c.address for c in t.candidates(until)] == [("h", 1)]
    assert 0.075 <= delays[0] <= 0.125 and delays[-1] <= 1.25
    assert all(b >= a * 1.5 for a, b in zip(delays[:3], delays[1:4]))  # doubling, with jitter
    assert "refused" in t.describe_errors()
    t.succeeded(("h", 1))
    assert t.available(("h", 1), 0) and t.describe_errors() == "no node tried"


def test_plan_keeps_seeds_without_discovery_and_puts_the_target_first():
    t = Topology([("127.0.0.1", 7711)], rng=random.Random(3))
    t.learn(_hello(("a", 1, 1), ("b", 2, 1), ("c", 3, 1)))
    assert [c.id for c in t.plan(0, discover=False)] == ["a"]
    for _ in range(5):
        assert t.plan(0, first=("127.0.0.3", 7711))[0].id == "c"


def test_outranked():
    t = Topology([("127.0.0.1", 7711)])
    t.learn(_hello(("a", 1, 1), ("b", 2, 1)))
    assert not t.outranked("a", 0)
    t.mark_leaving("a")
    assert t.outranked("a", 0)
    t.failed(("127.0.0.2", 7711), 0)  # the better node is backing off: stay
    assert not t.outranked("a", 0)


# -- the consumer rule -------------------------------------------------------------

def test_tracker_needs_a_full_window_and_a_majority():
    tr = OriginTracker(window=10, share=0.5)
    tr.observe(["bbbbbbbb"] * 9)
    assert tr.suggest("aaaaaaaa") is None  # 9 < window
    tr.observe(["bbbbbbbb"])
    assert tr.suggest("aaaaaaaa") == "bbbbbbbb"
    assert tr.suggest("aaaaaaaa") is None  # a new window starts after a suggestion
    tr.observe(["bbbbbbbb"] * 5 + ["aaaaaaaa"] * 5)
    assert tr.suggest("aaaaaaaa") is None  # exactly half is not most
    tr.observe(["aaaaaaaa"] * 10)
    assert tr.suggest("aaaaaaaa") is None  # already on the producing node


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), max_size=60), st.integers(1, 20),
       st.floats(0.05, 0.95), st.sampled_from(["a", "b", "c"]))
def test_tracker_invariants(origins, window, share, current):
    tr = OriginTracker(window, share)
    tr.observe(origins)
    recent = origins[-window:]
    suggestion = tr.suggest(current)
    if suggestion is not None:
        assert suggestion != current and len(origins) >= window
        assert recent.count(suggestion) > share * window
        assert recent.count(suggestion) > recent.count(current)
    elif len(origins) >= window:  # no other node produced most, and more than the current one
        assert all(recent.count(o) <= share * window or recent.count(o) <= recent.count(current)
                   for o in set(recent) - {current})


def test_consumer_target_checks_rank_and_reachability():
    t = Topology([("127.0.0.1", 7711)])
    t.learn(_hello(("aaaaaaaa11", 1, 1), ("bbbbbbbb22", 2, 1), ("cccccccc33", 3, 100)))
    tr = OriginTracker(window=4)
    assert t.consumer_target(tr, "aaaaaaaa11", ["bbbbbbbb"] * 4, 0).id == "bbbbbbbb22"
    assert t.consumer_target(tr, "aaaaaaaa11", ["cccccccc"] * 4, 0) is None  # leaving: never
    assert t.consumer_target(tr, "aaaaaaaa11", ["dddddddd"] * 4, 0) is None  # unknown node
    t.failed(("127.0.0.2", 7711), 0)
    assert t.consumer_target(tr, "aaaaaaaa11", ["bbbbbbbb"] * 4, 0) is None  # backing off


def test_means_leaving():
    assert errors.means_leaving(errors.from_reply("LEAVING This node is leaving the cluster"))
    assert errors.means_leaving(errors.from_reply(
        "NOREPL Not enough reachable nodes for the requested replication level, since I'm unable to hold "
        "a copy of the message for the following reason: I'm leaving the cluster"))
    assert not errors.means_leaving(errors.from_reply("NOREPL Timeout reached before replicating"))
    assert not errors.means_leaving(errors.from_reply("ERR I'm leaving the cluster"))


def test_call_defaults():
    call = Call(["PING"])
    assert call.parse(b"PONG", "n") == b"PONG" and call.prefer is None and call.pin is None


def test_admin_command_lines():
    assert C.time().args == ["TIME"] and C.time().parse([b"17", b"5"], None) == (17, 5)
    assert C.config_get("hz").parse([b"hz", b"10"], None) == {"hz": "10"}
    assert C.config_set("hz", 12).args == ["CONFIG", "SET", "hz", 12]
    assert C.cluster_meet("h", "7712").args == ["CLUSTER", "MEET", "h", 7712]
    assert C.cluster_leaving().args == ["CLUSTER", "LEAVING", "yes"]
    assert C.cluster_leaving(False).args == ["CLUSTER", "LEAVING", "no"]
    assert C.cluster_forget("abc").args == ["CLUSTER", "FORGET", "abc"]
    assert C.cluster_info().parse(b"cluster_state:ok\r\ncluster_known_nodes:3\r\n", None) == {
        "cluster_state": "ok", "cluster_known_nodes": "3"}


def test_access_errors_are_the_refusals_no_other_node_answers_differently():
    assert errors.ACCESS_ERRORS == (errors.AuthError, errors.NoPermission)
    assert not issubclass(errors.NoPermission, errors.AuthError)  # a command refused, not a login
    assert not errors.means_leaving(errors.from_reply("NOPERM No permissions to access a queue"))


# -- logging in ----------------------------------------------------------------------

@pytest.mark.parametrize("username, password, sent", [
    ("alice", "alicepw", ["AUTH", "alice", "alicepw"]),
    ("alice", None, ["AUTH", "alice", ""]),       # a nopass user takes any password
    ("alice", "", ["AUTH", "alice", ""]),
    (None, "pw", ["AUTH", "pw"]),                 # the default user, as before users existed
    ("", "pw", ["AUTH", "pw"]),
    (None, None, None),
    (None, "", None),
    ("", "", None),
])
def test_auth_args(username, password, sent):
    assert auth_args(username, password) == sent
    user, pw = login(username, password)
    assert (pw is None) == (sent is None) and user == (sent[1] if sent and len(sent) == 3 else None)


class FakeSocket:
    """A node's end of one connection for the blocking client: parses what
    the client sends and answers each command with ``answer(args)`` (RESP
    bytes; ``None`` closes the connection).  ``sent`` lists the commands."""

    def __init__(self, answer):
        self.answer = answer
        self.reader = hiredis.Reader()
        self.sent = []
        self.pending = b""
        self.closed = False

    def setsockopt(self, *args):
        pass

    def settimeout(self, seconds):
        pass

    def sendall(self, data):
        self.reader.feed(data)
        while True:
            command = self.reader.gets()
            if command is False:
                return
            args = [a.decode() for a in command]
            self.sent.append(args)
            out = self.answer(args)
            if out is None:
                self.closed = True
                return
            self.pending += out

    def recv(self, size):
        out, self.pending = self.pending[:size], self.pending[size:]
        return out  # b"" once closed: the node hung up

    def close(self):
        self.closed = True


def fake_nodes(monkeypatch, answers):
    """Connections to 127.0.0.1:<port> go to a FakeSocket answering with
    ``answers[port]``; returns {port: [FakeSocket, ...]} as they open."""
    opened = {port: [] for port in answers}

    def create_connection(address, timeout=None):
        sock = FakeSocket(answers[address[1]])
        opened[address[1]].append(sock)
        return sock
    monkeypatch.setattr(connection.socket, "create_connection", create_connection)
    return opened


def node_answers(port, users, fail_qlen=False):
    """A node that accepts the AUTH lines in ``users`` (``-WRONGPASS`` for
    others), lists itself and the node at port+1 in HELLO, answers QLEN 0,
    or closes the connection on QLEN when ``fail_qlen``."""
    def answer(args):
        if args[0] == "AUTH":
            if tuple(args[1:]) in users:
                return reply.OK
            return reply.error(b"WRONGPASS invalid username-password pair or user is disabled.")
        if args[0] == "HELLO":
            me = b"%d" % port
            return reply.array([reply.integer(1), reply.bulk(me * 8)] + [
                reply.bulk_array([b"%d" % p * 8, b"127.0.0.1", b"%d" % p, b"1"]) for p in (port, port + 1)])
        if args[0] == "QLEN":
            return None if fail_qlen else reply.integer(0)
        return reply.error(b"ERR unknown command")
    return answer


def test_connection_logs_in_with_username_and_password(monkeypatch):
    users = {("alice", "alicepw"), ("pw",)}
    opened = fake_nodes(monkeypatch, {1: node_answers(1, users)})
    for kwargs, sent in (({"username": "alice", "password": "alicepw"}, [["AUTH", "alice", "alicepw"]]),
                         ({"password": "pw"}, [["AUTH", "pw"]]),
                         ({}, [])):
        conn = connection.Connection("127.0.0.1", 1, **kwargs)
        assert conn.call("QLEN", "q") == 0 and conn.username == kwargs.get("username")
        assert opened[1][-1].sent == sent + [["QLEN", "q"]]
    # The positional password of before stays the default user's.
    connection.Connection("127.0.0.1", 1, "pw")
    assert opened[1][-1].sent == [["AUTH", "pw"]]


def test_connection_refused_pair_is_an_auth_error(monkeypatch):
    opened = fake_nodes(monkeypatch, {1: node_answers(1, {("alice", "alicepw")})})
    with pytest.raises(errors.AuthError) as e:
        connection.Connection("127.0.0.1", 1, "bobpw", username="alice")
    assert str(e.value) == ("AUTH failed on node 127.0.0.1:1: WRONGPASS invalid username-password "
                            "pair or user is disabled.")
    assert (e.value.address, e.value.code) == ("127.0.0.1:1", "WRONGPASS")
    assert opened[1][0].closed


def test_blocking_client_logs_in_again_on_failover(monkeypatch):
    users = {("alice", "alicepw")}
    opened = fake_nodes(monkeypatch, {1: node_answers(1, users, fail_qlen=True), 2: node_answers(2, users)})
    client = BlockingClient([("127.0.0.1", 1)], username="alice", password="alicepw", sleep=lambda s: None)
    assert client.qlen("q") == 0 and client.node_address == ("127.0.0.1", 2)
    # Node 1 (the seed) hung up on QLEN: the call ran again on node 2, which
    # HELLO had named, over a connection that logged in as alice too.
    assert opened[1][0].sent == [["AUTH", "alice", "alicepw"], ["HELLO"], ["QLEN", "q"]]
    assert opened[2][0].sent[0] == ["AUTH", "alice", "alicepw"] and opened[2][0].sent[-1] == ["QLEN", "q"]


def test_blocking_client_raises_a_refused_login_at_once(monkeypatch):
    opened = fake_nodes(monkeypatch, {1: node_answers(1, {("alice", "alicepw")}), 2: node_answers(2, set())})
    client = BlockingClient([("127.0.0.1", 1), ("127.0.0.1", 2)], username="alice", password="nope",
                            sleep=lambda s: pytest.fail("a refused login is not retried"))
    with pytest.raises(errors.AuthError, match="WRONGPASS"):
        client.qlen("q")
    assert len(opened[1]) + len(opened[2]) == 1  # one node tried, not the other, not again


def test_blocking_client_raises_noperm_as_is(monkeypatch):
    def answer(args):
        if args == ["QLEN", "b:q"]:
            return reply.error(b"NOPERM No permissions to access a queue")
        return node_answers(1, {("alice", "alicepw")})(args)
    opened = fake_nodes(monkeypatch, {1: answer, 2: node_answers(2, set())})
    client = BlockingClient([("127.0.0.1", 1)], username="alice", password="alicepw")
    with pytest.raises(errors.NoPermission, match="No permissions to access a queue"):
        client.qlen("b:q")
    # An answer, not a failure: no other node tried, the connection kept.
    assert client.qlen("a:q") == 0
    assert len(opened[1]) == 1 and not opened[1][0].closed and opened[2] == []


def test_schedule_calls_build_their_command_lines_and_read_replies():
    call = C.schedule_add("tick", "q", b"hello", every_ms=1000, catchup="one", replicate=2, ttl=60,
                          priority=7)
    assert call.args == ["SCHEDULE", "ADD", "tick", "q", b"hello", "EVERY", 1000, "CATCHUP", "one",
                         "REPLICATE", 2, "TTL", 60, "PRIORITY", 7]
    assert C.schedule_add("d", "q", b"x", cron="0 9 * * 1-5", tz="Europe/Paris").args == \
        ["SCHEDULE", "ADD", "d", "q", b"x", "CRON", "0 9 * * 1-5", "TZ", "Europe/Paris"]
    for kwargs, message in (({}, "cron or every_ms"), ({"cron": "* * * * *", "every_ms": 5}, "cron or every_ms"),
                            ({"every_ms": 1000, "tz": "UTC"}, "tz goes with cron"),
                            ({"every_ms": 1000, "catchup": "some"}, "catchup must be"),
                            ({"every_ms": 1000, "priority": 10}, "priority must be between")):
        with pytest.raises(ValueError, match=message):
            C.schedule_add("s", "q", b"x", **kwargs)
    assert C.schedule_del("s").args == ["SCHEDULE", "DEL", "s"] and C.schedule_del("s").parse(1, None) == 1
    assert C.schedule_pause("s").args == ["SCHEDULE", "PAUSE", "s"]
    assert C.schedule_resume("s").args == ["SCHEDULE", "RESUME", "s"]
    assert C.schedules().parse([b"a", b"b"], None) == ["a", "b"]
    show = C.schedule_show("s", next=2)
    assert show.args == ["SCHEDULE", "SHOW", "s", "NEXT", 2]
    fields = show.parse([b"name", b"s", b"body", b"\xff", b"next", [5, 6], b"last-fire", None, b"runs", 3], None)
    assert fields == {"name": "s", "body": b"\xff", "next": [5, 6], "last-fire": None, "runs": 3}
