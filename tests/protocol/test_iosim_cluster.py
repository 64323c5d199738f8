"""Two real nodes over the real bus protocol, in memory.

Each node is a DisqueNodeService on its own MemoryReactorClock, joined to
the other by disque.testing.IOSimCluster over twisted.test.iosim: the
clients speak RESP to the real RESP protocol, the nodes speak the real bus
wire format through the real bus protocol and links, and time is a fake
clock moved by the test (no sockets, no real time).  ``cluster.frames`` is
what each node received on the bus, decoded: the tests read the messages
of the spec ("Cluster messages" in the README) from it."""

import struct

import pytest
from twisted.internet.protocol import Protocol

from disque.bus import wire
from disque.core import messages
from disque.testing import ErrorReply, IOSimCluster

NOREPL_TIMEOUT = b"NOREPL Timeout reached before replicating to the requested number of nodes"


def fields(text):
    return dict(line.split(b":", 1) for line in text.split(b"\r\n") if b":" in line)


def reachable(client):
    return int(fields(client.call("CLUSTER", "INFO"))[b"cluster_reachable_nodes"])


def link_state(client):
    """The link column of the peer's line in CLUSTER NODES (two nodes)."""
    peer, = [line for line in client.call("CLUSTER", "NODES").split(b"\n") if line and b"myself" not in line]
    return peer.split(b" ")[-1]


def registered_jobs(client):
    return int(fields(client.call("INFO", "JOBS"))[b"registered_jobs"])


def received(cluster, since, *types):
    """(sender, receiver, type name) of the bus messages delivered since
    ``since`` (an index of cluster.frames), of the given types or all."""
    return [(s, r, type(m).__name__) for s, r, m in cluster.frames[since:]
            if not types or isinstance(m, types)]


@pytest.fixture
def pair(tmp_path):
    """Nodes 0 (A) and 1 (B), met and linked, and a client of each."""
    cluster = IOSimCluster(2, tmp_path)
    a, b = cluster.client(0), cluster.client(1)
    assert a.call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[1]) == b"OK"
    cluster.advance(1.0)
    assert reachable(a) == reachable(b) == 1
    yield cluster, a, b
    cluster.stop()


@pytest.fixture
def trio(tmp_path):
    """Nodes 0 (A), 1 and 2, cluster-node-timeout 2000, A met both and 2 s
    gone by; a client of A and of B."""
    cluster = IOSimCluster(3, tmp_path, overrides={"cluster-node-timeout": "2000"})
    a, b = cluster.client(0), cluster.client(1)
    a.call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[1])
    a.call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[2])
    cluster.advance(2.0)
    yield cluster, a, b
    cluster.stop()


def test_nodes_meet_over_the_bus(pair):
    cluster, a, b = pair
    assert received(cluster, 0)[:2] == [(0, 1, "Meet"), (1, 0, "Pong")]
    b_id = b.call("CLUSTER", "MYID")
    assert b_id in a.call("CLUSTER", "NODES") and link_state(a) == b"connected"


def test_addjob_replicates_to_b_and_answers_only_after_gotjob(pair):
    cluster, a, b = pair
    start = len(cluster.frames)
    cluster.hold(1, 0)  # B's answers stay in flight
    a.send("ADDJOB", "q", "body", 5000, "REPLICATE", 2)
    cluster.advance(0.2)
    repl = [m for s, r, m in cluster.frames[start:] if isinstance(m, messages.ReplJob)]
    assert repl and all(m.job.queue == b"q" and m.job.body == b"body" and m.job.repl == 2 for m in repl)
    job_id = repl[0].job.id
    assert not a.replies  # B has its copy, A has not heard so yet
    assert b.call("SHOW", job_id)[4:6] == [b"state", b"active"]

    cluster.release(1, 0)
    assert received(cluster, start, messages.GotJob) and a.reply() == job_id
    assert a.call("SHOW", job_id)[4:6] == [b"state", b"queued"]


def test_getjob_and_ack_on_b_then_both_nodes_forget_the_job(pair):
    cluster, a, b = pair
    job_id = a.call("ADDJOB", "q", "body", 5000, "REPLICATE", 2)
    assert job_id.startswith(b"D-")

    start = len(cluster.frames)
    b.send("GETJOB", "TIMEOUT", 1000, "FROM", "q")
    cluster.pump()
    assert b.reply() == [[b"q", job_id, b"body"]]  # moved from A by federation
    assert received(cluster, start, messages.NeedJobs, messages.YourJobs)[:2] == [
        (1, 0, "NeedJobs"), (0, 1, "YourJobs")]

    start = len(cluster.frames)
    assert b.call("ACKJOB", job_id) == 1
    cluster.advance(0.5)
    assert received(cluster, start, messages.SetAck, messages.GotAck, messages.DelJob) == [
        (1, 0, "SetAck"), (0, 1, "GotAck"), (1, 0, "DelJob")]
    assert a.call("SHOW", job_id) is None and b.call("SHOW", job_id) is None
    assert registered_jobs(a) == registered_jobs(b) == 0


def test_link_lost_mid_replication_gives_norepl_at_the_timeout(pair):
    cluster, a, b = pair
    producer = cluster.client(0)  # a's connection stays free for questions
    start = len(cluster.frames)
    cluster.hold(0, 1)  # A's REPLJOB is in flight ...
    producer.send("ADDJOB", "q", "body", 3000, "REPLICATE", 2)
    cluster.pump()
    cluster.cut(0, 1)  # ... and lost with the link; reconnecting fails (retries: < 1.1 s apart)
    cluster.advance(2.9)
    assert not producer.replies and link_state(a) == b"disconnected"
    cluster.advance(0.2)
    assert producer.reply() == ErrorReply(NOREPL_TIMEOUT)
    assert producer.raw[-1] == b"-" + NOREPL_TIMEOUT + b"\r\n"
    assert received(cluster, start, messages.ReplJob) == []
    assert registered_jobs(a) == registered_jobs(b) == 0

    cluster.heal()
    cluster.advance(3.0)  # the links' next retries (at most 2 s apart) find the peer again
    assert link_state(a) == link_state(b) == b"connected"


def test_the_surviving_copy_is_requeued_when_its_creator_dies(pair):
    cluster, a, b = pair
    job_id = a.call("ADDJOB", "q", "body", 5000, "REPLICATE", 2, "RETRY", 2)
    assert b.call("SHOW", job_id)[4:6] == [b"state", b"active"]
    cluster.kill(0)
    cluster.advance(1.0)
    assert link_state(b) == b"disconnected"
    assert b.call("GETJOB", "NOHANG", "FROM", "q") is None  # not before RETRY
    cluster.advance(2.5)  # RETRY 2 s + the requeue's random spread (< 0.5 s)
    assert b.call("GETJOB", "NOHANG", "FROM", "q") == [[b"q", job_id, b"body"]]


def test_the_clock_is_fake_and_shared(tmp_path):
    cluster = IOSimCluster(2, tmp_path)
    try:
        start = cluster.now
        cluster.advance(10)
        assert cluster.now == start + 10
        assert [r.seconds() for r in cluster.reactors] == [start + 10] * 2
        a = cluster.client(0)
        assert int(a.call("TIME")[0]) == int(start + 10)
    finally:
        cluster.stop()


def hello_priorities(client, ports):
    """Port -> HELLO priority of each node, as ``client``'s node reports."""
    return {int(entry[2]): int(entry[3]) for entry in client.call("HELLO")[2:] if int(entry[2]) in ports}


def test_hello_priority_follows_what_the_node_knows_of_each_peer(trio):
    """1 healthy, 5 without a link, 10 suspected (PFAIL), 100 failed or
    leaving: clients pick the lowest."""
    cluster, a, b = trio
    ports = cluster.ports
    assert hello_priorities(a, ports) == {p: 1 for p in ports}
    cluster.kill(2)  # the link to C drops at once: no link, not suspected yet
    assert hello_priorities(a, ports) == {ports[0]: 1, ports[1]: 1, ports[2]: 5}
    cluster.advance(2.5)  # past cluster-node-timeout: suspected, then failed by the majority (A and B)
    assert hello_priorities(a, ports)[ports[2]] in (10, 100)
    cluster.advance(5.0)
    assert hello_priorities(a, ports)[ports[2]] == 100
    assert b.call("CLUSTER", "LEAVING", "yes") == b"OK"
    cluster.advance(1.0)
    assert hello_priorities(a, ports)[ports[1]] == 100
    assert hello_priorities(b, ports)[ports[1]] == 100


def test_hello_priority_of_a_suspected_peer_is_10(tmp_path):
    """Two nodes: a silent peer can be suspected (PFAIL) but never failed
    (no majority of other nodes to agree), so HELLO says 10."""
    cluster = IOSimCluster(2, tmp_path, overrides={"cluster-node-timeout": "2000"})
    try:
        a = cluster.client(0)
        a.call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[1])
        cluster.advance(2.0)
        cluster.hold(1, 0)  # B's PONGs stay in flight: the link is up, B is silent
        cluster.advance(4.0)
        assert hello_priorities(a, cluster.ports) == {cluster.ports[0]: 1, cluster.ports[1]: 10}
        cluster.release(1, 0)
        cluster.advance(1.0)
        assert hello_priorities(a, cluster.ports) == {cluster.ports[0]: 1, cluster.ports[1]: 1}
    finally:
        cluster.stop()


def c_line(client, cluster):
    """Node 2's line in ``client``'s CLUSTER NODES."""
    line, = [line for line in client.call("CLUSTER", "NODES").split(b"\n") if b":%d " % cluster.ports[2] in line]
    return line


def test_a_peer_back_from_a_failure_is_asked_within_100_ms_by_each_link(trio):
    """The original's cluster cron connects every node without a link each
    100 ms, so a failed peer that is back answers a PING (and is reachable
    again) within 100 ms, however long it was away.  Here C's own links
    cannot connect (cut one way): only A's and B's, retrying every 100 ms
    without backoff, bring it back, each time."""
    cluster, a, b = trio
    assert reachable(a) == reachable(b) == 2
    for _ in range(3):
        cluster.cut(0, 2)
        cluster.cut(1, 2)
        cluster.advance(10.0)  # dozens of failed attempts: no backoff grows meanwhile
        assert reachable(a) == reachable(b) == 1
        assert all(b" fail " in line for line in (c_line(a, cluster), c_line(b, cluster)))
        cluster.heal()
        cluster.cut_one_way(2, 0)
        cluster.cut_one_way(2, 1)
        cluster.advance(0.15)
        assert (reachable(a), reachable(b)) == (2, 2)
        assert all(b" noflags " in line and line.endswith(b" connected")
                   for line in (c_line(a, cluster), c_line(b, cluster)))


def test_an_answer_takes_the_peers_own_connection_while_our_link_is_down(pair):
    """A's link to B is down (refused, waiting for its next attempt) while
    B's link to A works: B's ADDJOB REPLICATE 2 reaches A, and A's GOTJOB
    goes back on the connection B opened, instead of being dropped until
    A's link is back (the ADDJOB would time out)."""
    cluster, a, b = pair
    cluster.cut_one_way(0, 1)
    since = len(cluster.frames)
    b.send("ADDJOB", "q", "x", "3000", "REPLICATE", "2")
    cluster.advance(0.2)
    job_id = b.reply()
    assert isinstance(job_id, bytes) and job_id.startswith(b"D-"), job_id
    assert (0, 1, "GotJob") in received(cluster, since, messages.GotJob)
    assert registered_jobs(a) == registered_jobs(b) == 1


def test_a_copy_whose_record_b_cannot_write_is_not_counted_until_it_is_on_disk(tmp_path):
    """B's disk is full: B keeps the copy in memory and its record for a
    retry, but its GOTJOB (which would let A acknowledge the job) leaves
    only once the record is on B's disk."""
    from tests.support.storage_faults import FaultyFileSystem

    cluster = IOSimCluster(2, tmp_path, overrides={"appendonly": "yes", "appendfsync": "always"})
    try:
        a, b = cluster.client(0), cluster.client(1)
        assert a.call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[1]) == b"OK"
        cluster.advance(1.0)
        fs = FaultyFileSystem()
        cluster.services[1].persistence.fs = fs
        fs.full()
        start = len(cluster.frames)
        a.send("ADDJOB", "q", "body", 20000, "REPLICATE", 2)
        cluster.advance(1.0)
        repl = [m for s, r, m in cluster.frames[start:] if isinstance(m, messages.ReplJob)]
        assert repl and not received(cluster, start, messages.GotJob)
        assert not a.replies
        assert b.call("PING") == ErrorReply(b"MISCONF Errors writing to the AOF file: No space left on device")
        fs.free()
        cluster.advance(0.5)
        job_id = a.reply()
        assert job_id == repl[0].job.id
        with open(cluster.services[1].persistence.path, "rb") as f:
            assert job_id in f.read()
    finally:
        cluster.stop()


class BusStranger(Protocol):
    """Whoever reaches a node's bus port, speaking the bus protocol under a
    made-up node ID (docs/security.md, "The cluster bus: who may join")."""

    def __init__(self):
        self.received = b""

    def dataReceived(self, data):
        self.received += data

    def messages(self):
        """The types of the messages it got."""
        types, data = [], self.received
        while data:
            (n,), data = struct.unpack(">I", data[:4]), data[4:]
            types.append(type(wire.decode(data[:n])[1]))
            data = data[n:]
        return types

    def send(self, msg, sender=b"f" * 40):
        frame = wire.encode(messages.Header(sender, b"127.0.0.1", 7999, messages.H_EXTENSIONS), msg)
        self.transport.write(struct.pack(">I", len(frame)) + frame)


def test_a_stranger_on_the_bus_of_a_lone_node_changes_nothing(tmp_path):
    """No password, loopback: the stranger's MEET makes it a claim (nothing
    answers at the address it gave), so the lone node still answers a plain
    ADDJOB (a MEET made it a member, and ADDJOB answered -NOREPL), and its
    NEEDJOBS, SETACK and DELJOB touch no job; it is not in the node file.
    (The same on real processes: tests/process/test_e2e_bus_closed.py.)"""
    cluster = IOSimCluster(1, tmp_path)
    try:
        c = cluster.client(0)
        job_id = c.call("ADDJOB", "q", "secret", 0)
        stranger = cluster.connect(0, BusStranger(), bus=True)
        for msg in (messages.Meet(()), messages.NeedJobs(b"q", 10), messages.SetAck(job_id, 1),
                    messages.DelJob(job_id)):
            stranger.send(msg)
        cluster.advance(1.0)
        assert c.call("ADDJOB", "q", "another", 0).startswith(b"D-")
        assert c.call("QLEN", "q") == 2 and c.call("SHOW", job_id) is not None
        assert stranger.messages() == [messages.Pong]  # the answer to its MEET, nothing more (no YOURJOBS)
        with open(tmp_path / "node-0" / "nodes.conf", "rb") as f:
            assert b"f" * 40 not in f.read()
        cluster.advance(20.0)  # the claim expires
        assert len([line for line in c.call("CLUSTER", "NODES").split(b"\n") if line]) == 1
    finally:
        cluster.stop()
