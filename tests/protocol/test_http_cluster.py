"""``/api/cluster`` (disque/http/cluster.py, disque/node/census.py) on three
real nodes wired in memory (disque.testing.IOSimCluster): the node asks
its peers for their counts over the real bus, sums them, says node by node
whether the counts are in (a killed peer, a silent one, one of an older
version), applies the asking user's queue patterns on every node, and
shows the jobs federation moved."""

import base64
import json

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from disque.core import messages
from disque.testing import IOSimCluster

HTTP = [8301, 8302, 0]  # node 2 has no HTTP side


@pytest.fixture
def trio(tmp_path):
    cluster = IOSimCluster(3, tmp_path, overrides={"cluster-node-timeout": "2000"})
    for i, port in enumerate(HTTP):  # what each node tells its peers (the site is built by request())
        cluster.services[i].runtime.config.apply_overrides({"http-port": str(port)})
    yield cluster
    cluster.stop()


def _site(cluster, i):
    from disque.http.access import AccessSite
    from disque.http.site import DefaultFrontend

    service = cluster.services[i]
    if not hasattr(service, "_test_site"):
        service._test_site = AccessSite(DefaultFrontend().resource(service), service.runtime)
    return service._test_site


def request(cluster, i, path, auth=None, settle=0.0):
    """(status, JSON) of ``GET path`` on node ``i``'s HTTP side, the
    cluster's clock moved by ``settle`` seconds (and its bytes delivered)
    for the answer to come."""
    addr = IPv4Address("TCP", "127.0.0.1", 40000)
    proto = _site(cluster, i).buildProtocol(addr)
    tr = StringTransport(peerAddress=addr)
    proto.makeConnection(tr)
    extra = b"Authorization: %s\r\n" % auth if auth else b""
    proto.dataReceived(b"GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n%s\r\n" % (path, extra))
    cluster.pump()
    if settle:
        cluster.advance(settle)
    head, _, raw = tr.value().partition(b"\r\n\r\n")
    assert head, "no answer yet"
    return int(head.split(b" ")[1]), json.loads(raw)


def meet(cluster):
    a = cluster.client(0)
    for port in cluster.ports[1:]:
        assert a.call("CLUSTER", "MEET", "127.0.0.1", port) == b"OK"
    cluster.advance(2.0)
    for i in range(3):
        info = cluster.client(i).call("CLUSTER", "INFO")
        assert b"cluster_reachable_nodes:2" in info, (i, info)


def ids(cluster):
    return [s.runtime.node.my_id.decode() for s in cluster.services]


def add(cluster, i, queue, n):
    c = cluster.client(i)
    for k in range(n):
        c.call("ADDJOB", queue, "job %d" % k, "0", "REPLICATE", "1")


def by_name(reply):
    return {q["name"]: q for q in reply["queues"]}


def test_the_queues_summed_with_each_nodes_part(trio):
    cluster = trio
    meet(cluster)
    node_ids = ids(cluster)
    add(cluster, 0, "orders", 3)
    add(cluster, 1, "orders", 2)
    add(cluster, 2, "orders", 4)
    add(cluster, 1, "mail", 1)
    status, reply = request(cluster, 0, b"/api/cluster")
    assert status == 200
    assert reply["complete"] is True and reply["asked"] == 3 and reply["answered"] == 3
    assert [n["answer"] for n in reply["nodes"]] == ["ok", "ok", "ok"]
    nodes = {n["id"]: n for n in reply["nodes"]}
    assert [nodes[i]["jobs"] for i in node_ids] == [3, 3, 4]
    assert [nodes[i]["queued"] for i in node_ids] == [3, 3, 4]
    # Where each peer's dashboard is: its http-bind and http-port; none for a node without.
    assert nodes[node_ids[0]]["dashboard"] is None  # (this page)
    assert nodes[node_ids[1]]["dashboard"] == "http://127.0.0.1:8302/"
    assert nodes[node_ids[2]]["dashboard"] is None
    queues = by_name(reply)
    assert queues["orders"]["len"] == 9 and queues["orders"]["added"] == 9
    assert queues["orders"]["nodes"] == {node_ids[0]: 3, node_ids[1]: 2, node_ids[2]: 4}
    assert queues["mail"]["nodes"] == {node_ids[0]: 0, node_ids[1]: 1, node_ids[2]: 0}
    assert [q["name"] for q in reply["queues"]] == ["orders", "mail"] and reply["distinct"] == 2
    # The filter and the limit apply on every node.
    reply = request(cluster, 0, b"/api/cluster?filter=mai")[1]
    assert [q["name"] for q in reply["queues"]] == ["mail"]
    # Each node gives its longest: a node whose list was cut may hold a
    # queue it did not give (unknown: null), one whose list is whole does not (0).
    add(cluster, 1, "mail", 4)  # node 1: mail 5, orders 2; node 0: orders 3; node 2: orders 4
    reply = request(cluster, 0, b"/api/cluster?limit=1")[1]
    assert [q["name"] for q in reply["queues"]] == ["orders"] and reply["distinct"] == 2
    assert reply["queues"][0]["nodes"] == {node_ids[0]: 3, node_ids[1]: None, node_ids[2]: 4}
    assert reply["queues"][0]["len"] == 7  # the sum of what the nodes gave


def test_a_killed_node_is_unreachable_and_a_silent_one_times_out(trio):
    cluster = trio
    meet(cluster)
    node_ids = ids(cluster)
    for i in range(3):
        add(cluster, i, "q", i + 1)
    cluster.kill(2)
    status, reply = request(cluster, 0, b"/api/cluster")
    assert status == 200 and reply["complete"] is False and reply["answered"] == 2
    nodes = {n["id"]: n for n in reply["nodes"]}
    assert nodes[node_ids[2]]["answer"] == "unreachable" and nodes[node_ids[2]]["jobs"] is None
    q = by_name(reply)["q"]
    assert q["len"] == 3 and node_ids[2] not in q["nodes"]  # left out of the sums, and said so

    cluster.hold(1, 0)  # node 1's frames to node 0 stay in flight
    with pytest.raises(AssertionError, match="no answer yet"):
        request(cluster, 0, b"/api/cluster", settle=0.9)
    status, reply = request(cluster, 0, b"/api/cluster", settle=1.0)
    nodes = {n["id"]: n for n in reply["nodes"]}
    assert nodes[node_ids[1]]["answer"] == "timeout" and by_name(reply)["q"]["len"] == 1
    cluster.release(1, 0)
    cluster.pump()  # its late answer is ignored
    reply = request(cluster, 0, b"/api/cluster")[1]
    assert [n["answer"] for n in reply["nodes"]] == ["ok", "ok", "unreachable"]


def test_a_node_of_an_older_version_is_said_so_and_never_asked(trio):
    cluster = trio
    old = cluster.services[2].runtime.node.cluster
    header = old.header
    old.header = lambda: header()._replace(flags=header().flags & ~messages.H_COUNTS)
    meet(cluster)
    node_ids = ids(cluster)
    since = len(cluster.frames)
    reply = request(cluster, 0, b"/api/cluster")[1]
    assert {n["id"]: n["answer"] for n in reply["nodes"]}[node_ids[2]] == "old-version"
    assert reply["complete"] is False
    asked = [r for s, r, m in cluster.frames[since:] if isinstance(m, messages.CountsAsk)]
    assert asked == [1]


def test_a_user_limited_to_some_queues_sees_those_on_every_node(trio):
    cluster = trio
    for i in range(3):
        cluster.client(i).call("ACL", "SETUSER", "tenant", "on", ">pw", "~t1:*", "+@inspect")
    meet(cluster)
    for i in range(3):
        add(cluster, i, "t1:jobs", 1)
        add(cluster, i, "t2:jobs", 5)
    auth = b"Basic " + base64.b64encode(b"tenant:pw")
    reply = request(cluster, 0, b"/api/cluster", auth=auth)[1]
    assert [q["name"] for q in reply["queues"]] == ["t1:jobs"] and reply["queues"][0]["len"] == 3
    assert [n["queues"] for n in reply["nodes"]] == [1, 1, 1]
    # A user who may not list queues reads nothing.
    for i in range(3):
        cluster.client(i).call("ACL", "SETUSER", "blind", "on", ">pw", "~*", "+info")
    status, reply = request(cluster, 0, b"/api/cluster", auth=b"Basic " + base64.b64encode(b"blind:pw"))
    assert status == 403 and reply["error"].startswith("-NOPERM")


def test_jobs_moved_by_federation_are_counted_where_they_left_and_arrived(trio):
    cluster = trio
    meet(cluster)
    node_ids = ids(cluster)
    add(cluster, 0, "work", 40)
    consumer = cluster.client(1)
    got = []
    for _ in range(5):
        got += consumer.call("GETJOB", "TIMEOUT", "500", "COUNT", "1", "FROM", "work") or []
        cluster.advance(0.2)
    for job in got:
        consumer.call("ACKJOB", job[1])
    cluster.advance(0.5)
    qstat = dict(zip(*[iter(cluster.client(0).call("QSTAT", "work"))] * 2))
    moved = qstat[b"jobs-out"]  # node 0 delivered nothing itself: every job out of it went to node 1
    assert moved >= 5 and b"moved-out" not in qstat  # (QSTAT stays the original's reply)
    status, mine = request(cluster, 0, b"/api/queues")
    [row] = mine["queues"]
    assert row["removed"] == row["moved_out"] == moved and row["moved_in"] == 0
    reply = request(cluster, 0, b"/api/cluster")[1]
    q = by_name(reply)["work"]
    assert q["moved_out"] == moved and q["moved_in"] == moved  # what left node 0 arrived at node 1
    assert q["acked"] == len(got) == 5
    assert q["nodes"][node_ids[0]] + q["nodes"][node_ids[1]] == 40 - 5
    assert q["removed"] == moved + 5  # node 0's moves, node 1's deliveries


@pytest.mark.parametrize("bind,port,tls,expected", [
    (b"127.0.0.1", 7790, False, "http://127.0.0.1:7790/"),
    (b"0.0.0.0", 7790, False, "http://10.0.0.7:7790/"),  # every address: the one the cluster knows
    (b"::", 7790, True, "https://10.0.0.7:7790/"),
    (b"::1", 7790, False, "http://[::1]:7790/"),
    (b"dash.example", 443, True, "https://dash.example:443/"),
    (b"127.0.0.1", 0, False, None),  # no HTTP side
    (b"evil.example/x?", 7790, False, None),  # a peer's answer is no way to plant any link
    (b"a@b", 7790, False, None),
])
def test_a_peers_dashboard_address(bind, port, tls, expected):
    from disque.node.census import dashboard_url

    counts = messages.Counts(1, 0, 0, 0, 0, (), port, tls, bind)
    assert dashboard_url(counts, b"10.0.0.7") == expected
