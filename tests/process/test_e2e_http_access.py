"""The HTTP side's access rules on real nodes, with urllib: two tenants
kept apart (their queues, job bodies and actions), a foreign Host header
refused, and protected mode seen from another host (a node in a network
namespace answering an HTTP request from outside it 403 -DENIED)."""

import base64
import json
import urllib.error
import urllib.request

import pytest

from tests.support import netns
from tests.support.process import NodeProcess, free_port, wait_for

ns = netns.fixture()

USERS = """\
user alice on >alice-pw ~a:* +@all
user bob on >bob-pw ~b:* +@all
"""


def http(host, port, path, user=None, method="GET", payload=None, headers=None):
    """(status, headers, body) of one request with urllib."""
    data = json.dumps(payload or {}).encode() if method == "POST" else None
    req = urllib.request.Request("http://%s:%d%s" % (host, port, path), data=data, method=method)
    if user:
        req.add_header("Authorization", "Basic " + base64.b64encode(("%s:%s-pw" % (user, user)).encode()).decode())
    if method == "POST":
        req.add_header("X-Disque-Action", "1")
        req.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


@pytest.fixture(scope="module")
def tenants(tmp_path_factory):
    """A node with alice and bob, a job each: (node, HTTP port, alice's
    job ID, bob's job ID)."""
    workdir = tmp_path_factory.mktemp("http-access")
    (workdir / "users.acl").write_text(USERS)
    conf = workdir / "disque.conf"
    conf.write_text("aclfile users.acl\n")
    port = free_port()
    node = NodeProcess(workdir, config=str(conf), args=["--set", "http-port=%d" % port]).start()
    c = node.client()
    a = c.call("ADDJOB", "a:orders", "alice-secret", "0").decode()
    b = c.call("ADDJOB", "b:orders", "bob-secret", "0").decode()
    c.close()
    yield node, port, a, b
    node.stop()


def test_tenants_see_and_touch_only_their_own(tenants):
    node, port, a, b = tenants
    status, _, body = http("127.0.0.1", port, "/api/queues", "alice")
    assert status == 200 and [q["name"] for q in json.loads(body)["queues"]] == ["a:orders"]
    status, _, body = http("127.0.0.1", port, "/api/jobs/" + a, "alice")
    assert status == 200 and json.loads(body)["body"] == "alice-secret"
    for path in ("/api/jobs/" + b, "/api/queues/b:orders"):
        status, _, body = http("127.0.0.1", port, path, "alice")
        assert status == 403 and b"bob-secret" not in body and json.loads(body)["error"].startswith("-NOPERM")
    for path in ("/api/jobs/%s/delete" % b, "/api/jobs/%s/requeue" % b):
        status, _, body = http("127.0.0.1", port, path, "alice", method="POST")
        assert (status, json.loads(body)) == (403, {"error": "-NOPERM No permissions to access a job"})
    status, _, body = http("127.0.0.1", port, "/api/queues/b:orders/pause", "alice", "POST", {"state": "all"})
    assert status == 403
    metrics = http("127.0.0.1", port, "/metrics", "alice")[2]
    assert b'queue="a:orders"' in metrics and b"b:orders" not in metrics
    # bob's job is whole, and his; the refusals are in ACL LOG
    status, _, body = http("127.0.0.1", port, "/api/queues/b:orders", "bob")
    assert status == 200 and [j["body"] for j in json.loads(body)["jobs"]] == ["bob-secret"]
    c = node.client()
    assert c.call("QLEN", "b:orders") == 1 and c.call("PAUSE", "b:orders", "state") == b"none"
    assert b"alice" in b" ".join(v for entry in c.call("ACL", "LOG") for v in entry if isinstance(v, bytes))
    c.close()


def test_a_foreign_host_header_is_refused(tenants):
    node, port, a, _ = tenants
    for host in ("evil.example", "evil.example:%d" % port):
        status, headers, body = http("127.0.0.1", port, "/api/jobs/" + a, "alice", headers={"Host": host})
        assert status == 421 and b"alice-secret" not in body and b"http-allowed-hosts" in body
        assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    for host in ("localhost:%d" % port, "127.0.0.1:%d" % port):
        status, headers, body = http("127.0.0.1", port, "/api/jobs/" + a, "alice", headers={"Host": host})
        assert status == 200 and b"alice-secret" in body and headers["Cache-Control"] == "no-store"


def test_protected_mode_denies_http_from_another_host(ns, tmp_path):
    """Defaults but for the addresses (loopback and the namespace's for
    clients, the namespace's for HTTP) and a cluster-password (so the bus
    beyond loopback may start): an HTTP request from another host gets
    403 and the -DENIED text, never a job."""
    port = free_port()
    node = NodeProcess(tmp_path / "n", host=ns.inside, prefix=ns.prefix,
                       args=["--bind", "127.0.0.1 " + ns.inside, "--set", "cluster-password=somesecret",
                             "--set", "http-port=%d" % port, "--set", "http-bind=" + ns.inside]).start()
    try:
        job = ns.run("redis-cli", "-h", "127.0.0.1", "-p", str(node.port), "ADDJOB", "q", "the-secret", "0").stdout
        assert job.startswith("D-")
        for path in ("/api/jobs/" + job.strip(), "/api/queues/q", "/metrics", "/"):
            status, headers, body = http(ns.inside, port, path)
            assert status == 403 and b"the-secret" not in body, path
            assert b"DENIED Disque is running in protected mode" in body, path
            assert headers["Content-Security-Policy"].startswith("default-src 'none'")
        wait_for(lambda: "Refused client from %s: protected mode is enabled" % ns.outside in node.log(),
                 what="the refusal in the node's log")
    finally:
        node.stop()
