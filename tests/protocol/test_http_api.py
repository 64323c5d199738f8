"""The JSON API (disque/http/api.py) and the rates sampler, in memory: a
node service on a MemoryReactorClock, requests through the real Site."""

import base64
import json

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from disque.commands.context import Context
from disque.config import Config
from disque.core.node import NodeState
from disque.http.rates import Rates
from tests.support.memory import Node

PASSWORD = b"Authorization: Bearer s3cret\r\n"
ACTION = b"X-Disque-Action: 1\r\n"


@pytest.fixture
def make(tmp_path):
    """make(**directives) -> a started in-memory node, stopped after the test."""
    nodes = []

    def factory(**directives):
        nodes.append(Node(tmp_path / ("n%d" % len(nodes)), directives))
        return nodes[-1]

    yield factory
    for node in nodes:
        if node.service.running:
            node.service.stopService()


def request(node, method, path, headers=b"", body=b""):
    """(status, decoded JSON or raw body) of one request to the node's
    HTTP side, in memory."""
    [site] = [f for port, f, *_ in node.reactor.tcpServers if port == node.config["http-port"]]
    addr = IPv4Address("TCP", "127.0.0.1", 40000)
    proto = site.buildProtocol(addr)
    tr = StringTransport(peerAddress=addr)
    proto.makeConnection(tr)
    proto.dataReceived(b"%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: %d\r\n%s\r\n%s"
                       % (method, path, len(body), headers, body))
    head, _, raw = tr.value().partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if b"application/json" in head.lower():
        return status, json.loads(raw)
    return status, raw


def get(node, path, headers=b""):
    return request(node, b"GET", path, headers)


def post(node, path, payload=None, headers=PASSWORD + ACTION):
    return request(node, b"POST", path, headers, json.dumps(payload or {}).encode())


def add(conn, queue, body, *opts):
    return conn.call("ADDJOB", queue, body, "0", *opts)[1:-2]


def test_node_and_queues_report_what_the_commands_see(make):
    node = make(**{"http-port": "8080"})
    c = node.connect()
    ids = [add(c, "orders", "o%d" % i) for i in range(3)]
    add(c, "mail", b"\xff\xfebinary")
    c.call("GETJOB", "FROM", "orders")
    c.call("ACKJOB", ids[0])
    c.call("PAUSE", "mail", "in")
    node.advance(2.0)
    status, info = get(node, b"/api/node")
    assert status == 200
    assert info["id"] == node.runtime.node.my_id.decode() and info["actions"] is True  # the default user: +@all
    assert info["jobs"] == {"total": 3, "wait_repl": 0, "active": 0, "queued": 3, "acked": 0}
    assert info["latency"]["getjob_wait"]["count"] == 1
    assert info["latency"]["add_to_ack"]["count"] == 1
    assert info["persistence"]["aof_enabled"] == 0
    status, queues = get(node, b"/api/queues")
    assert [q["name"] for q in queues["queues"]] == ["orders", "mail"]
    orders = queues["queues"][0]
    assert (orders["len"], orders["added"], orders["removed"], orders["acked"], orders["paused"]) == (2, 3, 1, 1, "none")
    assert queues["queues"][1]["paused"] == "in"
    assert get(node, b"/api/queues?filter=mai")[1]["queues"][0]["name"] == "mail"
    assert get(node, b"/api/queues?limit=1")[1]["matching"] == 2
    status, mail = get(node, b"/api/queues/mail")
    [job] = mail["jobs"]
    assert job["body"] is None and base64.b64decode(job["body_base64"]) == b"\xff\xfebinary"
    status, one = get(node, b"/api/jobs/" + ids[1])
    assert (status, one["id"], one["state"], one["body"], one["queue"]) == (200, ids[1].decode(), "queued", "o1", "orders")
    assert get(node, b"/api/jobs/" + ids[0])[0] == 404  # acknowledged and collected on a single node
    assert get(node, b"/api/jobs/nope") == (400, {"error": "-BADID Invalid Job ID format."})
    assert get(node, b"/api/queues/nosuch")[0] == 404
    assert get(node, b"/api/nosuch")[0] == 404


def test_a_job_has_shows_fields(make):
    node = make(**{"http-port": "8080"})
    c = node.connect()
    job_id = add(c, "q", "payload", "RETRY", "7")
    show = c.call("SHOW", job_id)
    _, job = get(node, b"/api/jobs/" + job_id)
    for name in (b"id", b"queue", b"state", b"repl", b"ttl", b"ctime", b"delay", b"retry", b"nacks",
                 b"additional-deliveries", b"nodes-delivered", b"nodes-confirmed", b"next-requeue-within",
                 b"next-awake-within", b"body"):
        assert b"\r\n" + name + b"\r\n" in show and name.decode() in job
    assert job["retry"] == 7 and job["nodes-delivered"] == [node.runtime.node.my_id.decode()]


def test_job_ids_with_slashes_work_encoded_or_not(make):
    from urllib.parse import quote

    node = make(**{"http-port": "8080", "requirepass": "s3cret"})
    c = node.connect()
    c.call("AUTH", "s3cret")
    ids = [add(c, "q", "x") for _ in range(40)]
    slashed = [i for i in ids if b"/" in i]
    assert slashed  # 40 IDs of 24 base64 characters: some hold a /
    for job_id in slashed:
        assert get(node, b"/api/jobs/" + job_id, PASSWORD)[1]["id"] == job_id.decode()
        assert get(node, b"/api/jobs/" + quote(job_id, safe="").encode(), PASSWORD)[1]["id"] == job_id.decode()
    c.call("GETJOB", "COUNT", "40", "FROM", "q")
    assert post(node, b"/api/jobs/%s/requeue" % slashed[0]) == (200, {"requeued": 1})


def test_a_long_body_is_cut_in_the_queue_view_only(make):
    node = make(**{"http-port": "8080"})
    c = node.connect()
    job_id = add(c, "q", "x" * 5000)
    [job] = get(node, b"/api/queues/q")[1]["jobs"]
    assert len(job["body"]) == 1024 and job["body_truncated"] is True
    full = get(node, b"/api/jobs/" + job_id)[1]
    assert len(full["body"]) == 5000 and full["body_truncated"] is False


def test_nodes_lists_the_cluster_view(make):
    node = make(**{"http-port": "8080"})
    _, nodes = get(node, b"/api/nodes")
    [me] = nodes["nodes"]
    assert me["myself"] and me["up"] and me["id"] == nodes["myself"] and me["flags"] == "myself"


def test_actions_need_the_header_and_the_password_when_set(make):
    open_node = make(**{"http-port": "8080"})
    assert post(open_node, b"/api/queues/q/pause", {"state": "all"}, headers=b"") == (
        403, {"error": "-ERR actions need the header X-Disque-Action: 1"})
    assert open_node.runtime.node.queues.get(b"q") is None
    # no password: the default user (+@all) acts, as it would over RESP (from loopback: protected mode)
    assert post(open_node, b"/api/queues/q/pause", {"state": "all"}, headers=ACTION)[1]["paused"] == "all"
    node = make(**{"http-port": "8080", "requirepass": "s3cret"})
    assert post(node, b"/api/queues/q/pause", {"state": "all"}, headers=ACTION)[0] == 401
    assert post(node, b"/api/queues/q/pause", {"state": "all"}, headers=PASSWORD)[0] == 403  # no header
    assert get(node, b"/api/node") == (401, {"error": "-NOAUTH Authentication required."})
    assert get(node, b"/api/node", PASSWORD)[1]["actions"] is True
    assert node.runtime.node.queues.get(b"q") is None


def test_actions_wait_for_the_aof_to_load(make):
    node = make(**{"http-port": "8080", "requirepass": "s3cret"})
    node.runtime.start_loading()
    assert post(node, b"/api/queues/q/pause", {"state": "all"}) == (
        503, {"error": "-LOADING Disque is loading the dataset in memory"})
    assert get(node, b"/api/node", PASSWORD)[0] == 200  # reads go on, with the progress
    node.runtime.finish_loading()
    assert post(node, b"/api/queues/q/pause", {"state": "all"})[0] == 200


def test_pause_requeue_delete(make):
    node = make(**{"http-port": "8080", "requirepass": "s3cret"})
    c = node.connect()
    c.call("AUTH", "s3cret")
    status, reply = post(node, b"/api/queues/q/pause", {"state": "out"})
    assert status == 200 and reply["paused"] == "out"
    assert c.call("PAUSE", "q", "state") == b"+out\r\n"
    assert post(node, b"/api/queues/q/pause", {"state": "sideways"})[0] == 400
    assert post(node, b"/api/queues/q/pause", {"state": "none"})[1]["paused"] == "none"
    assert c.call("PAUSE", "q", "state") == b"+none\r\n"
    job_id = add(c, "q", "work")
    c.call("GETJOB", "FROM", "q")
    assert c.call("QLEN", "q") == b":0\r\n"
    assert post(node, b"/api/jobs/%s/requeue" % job_id) == (200, {"requeued": 1})
    assert c.call("QLEN", "q") == b":1\r\n"
    assert post(node, b"/api/jobs/%s/delete" % job_id) == (200, {"deleted": 1})
    assert c.call("SHOW", job_id) == b"$-1\r\n"
    assert post(node, b"/api/jobs/%s/delete" % job_id)[0] == 404
    assert request(node, b"POST", b"/api/jobs/%s/delete" % job_id, PASSWORD + ACTION, b"[1")[0] == 400
    assert request(node, b"DELETE", b"/api/node", PASSWORD)[0] == 405


def test_an_actions_effects_are_carried_out(make):
    node = make(**{"http-port": "8080", "requirepass": "s3cret", "appendonly": "yes", "appendfsync": "no"})
    c = node.connect()
    c.call("AUTH", "s3cret")
    job_id = add(c, "q", "work")
    c.call("GETJOB", "FROM", "q")
    node.advance(0.1)
    aof = node.runtime.persistence
    before = aof.size
    post(node, b"/api/jobs/%s/delete" % job_id)
    node.advance(0.1)
    assert aof.size > before  # the DELJOB record was written, not left in the outbox
    assert node.runtime.node.outbox == []


def test_rates_from_counters():
    node = NodeState(b"f" * 40, 1_000_000)
    rates = Rates(Context(node, Config.defaults(), None), keep=3, recent=2)
    rates.sample(1000)
    assert rates.samples == [] or list(rates.samples) == []
    for _ in range(4):
        node.addjob.add(b"q", b"x", 1, 0, -1, 3600, 0, False)
    [job] = node.getjob.get_jobs([b"q"], 1)
    node.acks.ack_jobs([job.id])
    rates.sample(3000)  # 2 seconds later
    [sample] = rates.samples
    assert sample == {"t": 3000, "added": 2.0, "removed": 0.5, "acked": 0.5, "nacked": 0.0, "queued": 3}
    assert rates.of_queue(b"q") == (2.0, 0.5, 0.5, 0.0)
    rates.sample(4000)  # the window (2 samples back) still holds the adds: both say 4 in 3 s
    assert rates.samples[-1]["added"] == pytest.approx(4 / 3) and rates.of_queue(b"q")[0] == pytest.approx(4 / 3)
    rates.sample(5000)
    rates.sample(6000)
    assert [s["t"] for s in rates.samples] == [4000, 5000, 6000]  # keep=3
    assert rates.samples[-1]["added"] == 0.0
    assert rates.of_queue(b"q") == (0.0, 0.0, 0.0, 0.0)  # nothing in the last 2 s
    assert rates.of_queue(b"nosuch") == (0.0, 0.0, 0.0, 0.0)


def test_the_sampler_runs_with_the_service(make):
    node = make(**{"http-port": "8080"})
    c = node.connect()
    node.advance(1.0)
    for i in range(10):
        add(c, "q", "x")
    node.advance(2.0)
    rates = get(node, b"/api/rates")[1]
    samples = rates["samples"]
    assert rates["window"] == 10 and len(samples) == 2  # one second apart, each over the window so far
    assert samples[-1]["added"] == pytest.approx(5.0, rel=0.05)  # 10 jobs in the ~2 s since the first snapshot
    # The queues table says the same, over the same window.
    [row] = get(node, b"/api/queues")[1]["queues"]
    assert row["rate_in"] == samples[-1]["added"]
    assert samples[-1]["queued"] == 10
    node.service.stopService()
    assert not [call for call in node.reactor.getDelayedCalls() if "sample" in repr(call.func)]


def test_metrics_count_nacks_and_dead_letters(make):
    node = make(**{"http-port": "8011"})
    c = node.connect()
    job_id = add(c, "q", "x", "MAXDELIVERIES", "2")
    for _ in range(2):
        c.call("GETJOB", "FROM", "q")
        c.call("NACK", job_id, "DELAY", "10")
        node.advance(0.1)
    text = get(node, b"/metrics")[1]
    assert b"\ndisque_nacks_total 2\n" in text and b"\ndisque_dead_letters_total 1\n" in text


def test_metrics_show_the_queue_limits(make):
    """QLIMIT's figures, parsed by Prometheus' own parser: the limits of a
    limited queue, its part here, in flight and held."""
    from prometheus_client.parser import text_string_to_metric_families

    node = make(**{"http-port": "8012"})
    c = node.connect()
    for _ in range(3):
        add(c, "lim", "x")
    c.call("QLIMIT", "lim", "RATE", "0.5", "CONCURRENCY", "2")
    c.call("GETJOB", "COUNT", "3", "FROM", "lim")
    text = get(node, b"/metrics")[1]
    fams = {f.name: f for f in text_string_to_metric_families(text.decode())}
    values = {(s.name, s.labels.get("queue")): s.value for f in fams.values() for s in f.samples}
    assert values[("disque_queue_limit_rate", "lim")] == 0.5
    assert values[("disque_queue_limit_concurrency", "lim")] == 2
    assert values[("disque_queue_limit_share", "lim")] == 1.0
    assert values[("disque_queue_limit_in_flight", "lim")] == 1
    assert values[("disque_queue_limit_held_total", "lim")] == 1
    assert values[("disque_limit_held_total", None)] == 1
    assert fams["disque_limit_held"].type == "counter" and fams["disque_queue_limit_rate"].documentation


def test_metrics_show_the_memory_tier(make):
    node = make(**{"http-port": "8080"})
    c = node.connect()
    add(c, "q", "x" * 1000)
    assert b"\ndisque_memory_tier 0\n" in get(node, b"/metrics")[1]
    c.call("CONFIG", "SET", "maxmemory", "1")
    node.advance(0.2)  # the tick measures the level
    assert b"\ndisque_memory_tier 3\n" in get(node, b"/metrics")[1]


def test_a_limited_queue_shows_its_limits_in_the_queue_list(make):
    node = make(**{"http-port": "8080"})
    c = node.connect()
    add(c, "plain", "x")
    add(c, "limited", "x")
    assert c.call("QLIMIT", "limited", "RATE", "2.5", "CONCURRENCY", "3") == b"+OK\r\n"
    c.call("GETJOB", "FROM", "limited")
    status, body = get(node, b"/api/queues")
    rows = {q["name"]: q for q in body["queues"]}
    assert rows["plain"]["limit"] is None
    assert rows["limited"]["limit"] == {"rate": "2.5", "burst": 2, "concurrency": 3, "in_flight": 1, "held": 0}
