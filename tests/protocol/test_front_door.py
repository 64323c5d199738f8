"""The one front door (``NodeRuntime.run_command``): a request runs the same
checks and leaves the same traces -- its MONITOR line, its SLOWLOG entry,
its count in INFO commandstats -- whichever door it comes through: a RESP
client of the in-memory harness (:class:`disque.testing.IOSimClient`,
through the real RESP protocol) or an action of the HTTP side; a LOADING
node refuses through every door; a job an HTTP action gives a queue goes
to a client blocked on it at once, as after the same command over RESP."""

import json

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from disque.testing import ErrorReply, IOSimCluster

HTTP_PORT = 8080


@pytest.fixture
def cluster(tmp_path):
    cluster = IOSimCluster(1, tmp_path, overrides={"http-port": str(HTTP_PORT)})
    yield cluster
    cluster.stop()


def post(cluster, path: bytes, payload=None):
    """An HTTP action on node 0, as a local client without a password (the
    default user): (status, JSON answer)."""
    [site] = [f for port, f, *_ in cluster.reactors[0].tcpServers if port == HTTP_PORT]
    addr = IPv4Address("TCP", "127.0.0.1", 40000)
    proto = site.buildProtocol(addr)
    transport = StringTransport(peerAddress=addr, hostAddress=IPv4Address("TCP", "127.0.0.1", HTTP_PORT))
    proto.makeConnection(transport)
    body = json.dumps(payload or {}).encode()
    proto.dataReceived(b"POST %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-Disque-Action: 1\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (path, len(body), body))
    cluster.pump()
    head, _, answer = transport.value().partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(answer)


def calls(client, name: bytes) -> int:
    stats = client.call("INFO", "commandstats")
    return int(stats.partition(b"cmdstat_" + name + b":calls=")[2].partition(b",")[0] or 0)


def traces(cluster, client, monitor, door):
    """What running ``door()`` (an ENQUEUE of one job) leaves behind: the
    command of its MONITOR line (time and address cut), the arguments of
    its SLOWLOG entry, how much it added to INFO's command counts."""
    before = calls(client, b"enqueue")
    client.call("SLOWLOG", "RESET")
    monitor.replies.clear()
    door()
    cluster.pump()
    lines = [line for line in monitor.replies if b'"ENQUEUE"' in line]
    assert len(lines) == 1, list(monitor.replies)
    [entry] = [e for e in client.call("SLOWLOG", "GET") if e[3][0] == b"ENQUEUE"]
    added = calls(client, b"enqueue") - before
    return lines[0].partition(b"] ")[2], entry[3], added


def test_every_door_goes_through_run_command(cluster):
    """A command from the harness's RESP client and an HTTP action both
    reach the runtime's one front door."""
    runtime = cluster.services[0].runtime
    client = cluster.client(0)
    job = client.call("ADDJOB", "q", "body", "0")
    seen = []
    real = runtime.run_command

    def door(c, argv):
        seen.append(argv[0])
        return real(c, argv)

    runtime.run_command = door
    assert client.call("QLEN", "q") == 1
    assert post(cluster, b"/api/jobs/%s/requeue" % job) == (200, {"requeued": 0})  # queued already
    assert seen == [b"QLEN", b"ENQUEUE"]


def test_an_action_leaves_the_traces_of_the_same_command_over_resp(cluster):
    client, monitor = cluster.client(0), cluster.client(0)
    assert monitor.call("MONITOR") == b"OK"
    client.call("CONFIG", "SET", "slowlog-log-slower-than", "0")
    job = client.call("ADDJOB", "q", "body", "0")

    def over_resp():
        assert client.call("GETJOB", "FROM", "q")[0][1] == job
        assert client.call("ENQUEUE", job) == 1

    def over_http():
        assert client.call("GETJOB", "FROM", "q")[0][1] == job
        assert post(cluster, b"/api/jobs/%s/requeue" % job) == (200, {"requeued": 1})

    resp = traces(cluster, client, monitor, over_resp)
    http = traces(cluster, client, monitor, over_http)
    assert resp == http == (b'"ENQUEUE" "%s"' % job, [b"ENQUEUE", job], 1)


def test_a_loading_node_refuses_through_every_door(cluster):
    runtime = cluster.services[0].runtime
    client = cluster.client(0)
    job = client.call("ADDJOB", "q", "body", "0")
    before = calls(client, b"enqueue")
    runtime.start_loading()
    try:
        loading = ErrorReply(b"LOADING Disque is loading the dataset in memory")
        assert client.call("ENQUEUE", job) == loading
        assert client.call("QLEN", "q") == loading
        status, answer = post(cluster, b"/api/jobs/%s/requeue" % job)
        assert (status, answer) == (503, {"error": "-" + loading.message.decode()})
        status, answer = post(cluster, b"/api/queues/q/pause", {"state": "in"})
        assert (status, answer) == (503, {"error": "-" + loading.message.decode()})
        assert client.call("INFO", "persistence").startswith(b"# Persistence")  # flagged "loading": it runs
    finally:
        runtime.finish_loading()
    assert calls(client, b"enqueue") == before  # refused: never counted
    assert client.call("QLEN", "q") == 1


def test_a_job_an_action_queues_goes_to_a_blocked_client_at_once(cluster):
    """As after ENQUEUE over RESP: the blocked GETJOB is served by the
    action's own dispatch, not at the next tick."""
    client, waiter = cluster.client(0), cluster.client(0)
    job = client.call("ADDJOB", "q", "body", "0")
    assert client.call("GETJOB", "FROM", "q")[0][1] == job
    waiter.send("GETJOB", "TIMEOUT", "0", "FROM", "q")
    cluster.pump()
    assert not waiter.replies
    assert post(cluster, b"/api/jobs/%s/requeue" % job) == (200, {"requeued": 1})
    assert waiter.reply() == [[b"q", job, b"body"]]  # no time went by
