"""A closed cluster bus, on real processes (docs/security.md, "The cluster
bus: who may join").

* A node whose bus listens beyond loopback (here a network namespace's
  address, tests/support/netns.py) with neither cluster-password nor tls-cluster
  refuses to start in one line, unless cluster-trusted-network says the
  network is trusted.
* A stranger outside the namespace reaches the bus port of a default
  cluster there (so with cluster-password, as it must be) and sends
  well-formed MEET, NEEDJOBS, SETACK, DELJOB, YOURJOBS, FAIL and gossip
  frames: each fails, changes nothing, and is counted and logged with its
  address (once a minute per source, as failed_auth promises).
* On loopback, where no password is needed, the same stranger's MEET under
  a made-up ID leaves a lone node answering a plain ADDJOB (it answered
  -NOREPL when the MEET made the stranger a member), and its NEEDJOBS,
  SETACK and DELJOB are ignored and logged.

The clients of the nodes in the namespace authenticate (requirepass): a
client from outside the namespace would get -DENIED from protected mode
otherwise; the bus port is what the stranger attacks."""

import os
import select
import socket
import struct

import pytest

from tests.support import netns
from disque.bus import auth, wire
from disque.core import messages
from tests.support.process import NodeProcess, call, free_port, join_nodes, parse_info, twistd_path, wait_for

FAKE = b"f" * 40
PASSWORD = "clients-pw"
ONE_LINE_REFUSAL = ("disque: cluster-password: the cluster bus listens beyond loopback (%s) with neither "
                    "cluster-password nor tls-cluster yes: anyone who can reach it could join the cluster; set one "
                    "of them, or cluster-trusted-network yes if every host that can reach the bus may join")


ns = netns.fixture(scope="module")


class AuthNode(NodeProcess):
    """A node with requirepass whose clients authenticate."""

    def client(self):
        c = super().client()
        assert c.call("AUTH", PASSWORD) == b"OK"
        return c


def frame(msg, sender=FAKE, host=b"127.0.0.1", port=7999):
    data = wire.encode(messages.Header(sender, host, port, messages.H_EXTENSIONS), msg)
    return struct.pack(">I", len(data)) + data


def frames_in(data):
    """The messages of the bus frames in ``data`` (whole frames only)."""
    out = []
    while len(data) >= 4:
        (n,), body = struct.unpack(">I", data[:4]), data[4:]
        if len(body) < n:
            break
        out.append(wire.decode(body[:n])[1])
        data = body[n:]
    return out


def record(job_id, queue=b"q"):
    return messages.JobRecord(job_id, queue, b"planted", 1, 0, 10 ** 13, 0, 60, 0, 0, (FAKE,))


def stranger_attempts(job_id, member_id, gossip_host, gossip_port):
    return [
        ("MEET", messages.Meet(())),
        ("NEEDJOBS", messages.NeedJobs(b"q", 10)),
        ("SETACK", messages.SetAck(job_id, 1)),
        ("DELJOB", messages.DelJob(job_id)),
        ("YOURJOBS", messages.YourJobs((record(b"D-ffffffff-0123456789abcdefghijklmn-05a1"),))),
        ("FAIL", messages.Fail(member_id)),
        ("PING", messages.Ping((messages.Gossip(b"e" * 40, gossip_host, gossip_port, 0),))),
    ]


def membership(node):
    """CLUSTER NODES without the times: ID, address, flags, link."""
    return [line.split()[:3] + line.split()[-1:] for line in call(node, "CLUSTER", "NODES").splitlines()]


def nodes_file(node):
    with open(os.path.join(node.workdir, "nodes.conf"), "rb") as f:
        return f.read()


def failures(node):
    return int(parse_info(call(node, "INFO", "STATS").decode())["bus_auth_failures"])


def test_a_bus_beyond_loopback_without_a_password_or_tls_stops_start_up(ns, tmp_path):
    port = free_port()
    argv = (twistd_path(), "-n", "--pidfile=", "disque", "--port", str(port), "--bind", ns.inside,
            "--dir", str(tmp_path))
    p = ns.run(*argv, check=False, cwd=str(tmp_path), timeout=20)
    out = p.stdout + p.stderr
    assert p.returncode != 0 and "Traceback" not in out, out
    assert [line for line in out.splitlines() if line.strip()] == [ONE_LINE_REFUSAL % ns.inside]
    trusted = NodeProcess(tmp_path / "trusted", host=ns.inside, prefix=ns.prefix,
                          args=["--set", "cluster-trusted-network=yes"]).start()
    trusted.stop()


@pytest.fixture(scope="module")
def cluster_in_ns(ns, tmp_path_factory):
    """Two nodes in the namespace with defaults but for the password the
    bus beyond loopback needs (and requirepass, for our clients), joined,
    with a queued job on the first."""
    base = tmp_path_factory.mktemp("closed")
    args = ["--set", "cluster-password=the-bus-secret", "--requirepass", PASSWORD]
    nodes = [AuthNode(base / ("n%d" % i), host=ns.inside, prefix=ns.prefix, args=args) for i in range(2)]
    join_nodes(nodes)
    job_id = call(nodes[0], "ADDJOB", "q", "the body", 0, "REPLICATE", 1)
    assert job_id.startswith(b"D-")
    yield nodes, job_id
    for n in nodes:
        n.stop()


def test_a_stranger_outside_the_namespace_changes_nothing_on_a_default_cluster(ns, cluster_in_ns):
    (a, b), job_id = cluster_in_ns
    before = (membership(a), membership(b), nodes_file(a), failures(a))
    gossiped = socket.socket()  # where the gossip says a node listens: nobody must dial it
    gossiped.bind((ns.outside, 0))
    gossiped.listen(8)
    try:
        attempts = stranger_attempts(job_id, call(b, "CLUSTER", "MYID"), ns.outside.encode(),
                                     gossiped.getsockname()[1] - 10000)
        for name, msg in attempts:
            with socket.create_connection((ns.inside, a.port + 10000), timeout=5,
                                          source_address=(ns.outside, 0)) as s:
                s.sendall(frame(msg, host=ns.outside.encode()))
                got = b""
                while True:  # the node's challenge, then it closes: nothing but the handshake
                    data = s.recv(4096)
                    if not data:
                        break
                    got += data
                assert got[:6] == struct.pack(">I", 3 + auth.NONCE_LEN) + auth.MAGIC, name
                assert len(got) == 4 + 3 + auth.NONCE_LEN, name
        assert call(a, "QLEN", "q") == 1 and call(a, "SHOW", job_id) is not None
        assert failures(a) == before[3] + len(attempts)  # every attempt counted
        assert (membership(a), membership(b), nodes_file(a)) == before[:3]
        poller = select.poll()  # (select.select refuses a descriptor past 1024: seen on PyPy)
        poller.register(gossiped, select.POLLIN)
        assert poller.poll(500) == []  # no dial (a link retries every 100 ms)
    finally:
        gossiped.close()
    # One line a minute per source (disque.access.failed_auth): the first attempt's (its
    # reason: a message before the handshake, or a frame too long for one).
    lines = [line for line in a.log().splitlines() if "Failed bus authentication from %s" % ns.outside in line]
    assert len(lines) == 1 and ("sent a message before authenticating" in lines[0]
                                or "during the handshake" in lines[0]), a.log()[-3000:]


@pytest.fixture
def lone(tmp_path):
    node = NodeProcess(tmp_path / "lone").start()
    yield node
    node.stop()


def test_a_stranger_on_loopback_cannot_join_a_default_node_or_touch_its_jobs(lone):
    job_id = call(lone, "ADDJOB", "q", "the body", 0)
    dead = free_port()  # nothing listens at the address its MEET gives
    with socket.create_connection(("127.0.0.1", lone.port + 10000), timeout=5) as s:
        s.sendall(frame(messages.Meet(()), port=dead))
        for msg in (messages.NeedJobs(b"q", 10), messages.SetAck(job_id, 1), messages.DelJob(job_id)):
            s.sendall(frame(msg, port=dead))
        # Its MEET made it a member, and ADDJOB waited for a copy on it: -NOREPL.
        assert call(lone, "ADDJOB", "q", "another", 1000).startswith(b"D-")
        assert call(lone, "QLEN", "q") == 2 and call(lone, "SHOW", job_id) is not None
        assert FAKE not in nodes_file(lone)
        s.settimeout(0.5)
        got = b""
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                got += data
        except socket.timeout:
            pass
        assert [type(m) for m in frames_in(got)] == [messages.Pong]  # the answer to its MEET: no YOURJOBS
    log = wait_for(lambda: "Ignored DELJOB" in lone.log() and lone.log(), what="the attempts in the log")
    assert "Node ffffffff (127.0.0.1:%d) asks to join (MEET from 127.0.0.1)" % dead in log
    for name in ("NEEDJOBS", "SETACK", "DELJOB"):
        assert "Ignored %s from node ffffffff (from 127.0.0.1): not a member of this cluster" % name in log
