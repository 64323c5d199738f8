"""The HTTP side of real nodes with treq: /metrics parsed by the official
Prometheus parser, its values checked against INFO and QSTAT, and the
password required when requirepass is set."""

import pytest
import treq
from prometheus_client.parser import text_string_to_metric_families

from tests.support.process import NodeProcess, call, free_port, info, start_cluster
from tests.support.tx import reactor, run

# A killed peer shows down after cluster-node-timeout (15 s by default).
FAST = ("--cluster-node-timeout", "2000")


def get(port, path="/metrics", **kw):
    def fetch():
        d = treq.get("http://127.0.0.1:%d%s" % (port, path), reactor=reactor(), **kw)
        return d.addCallback(lambda r: treq.content(r).addCallback(lambda body: (r.code, r.headers, body)))
    return run(fetch)


def families(body):
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def value(fams, name, **labels):
    [sample] = [s for s in fams[name].samples if all(s.labels.get(k) == v for k, v in labels.items())
                and s.name in (name, name + "_total")]
    return sample.value


def test_metrics_parse_and_match_info(tmp_path):
    port = free_port()
    node = NodeProcess(tmp_path / "n", args=["--set", "http-port=%d" % port]).start()
    try:
        c = node.client()
        for i in range(5):
            c.call("ADDJOB", "orders", "o%d" % i, "0")
        c.call("ADDJOB", "mail", "m", "0")
        c.call("GETJOB", "FROM", "orders")
        c.call("PAUSE", "mail", "out")
        code, headers, body = get(port)
        assert code == 200
        assert headers.getRawHeaders("content-type") == ["text/plain; version=0.0.4; charset=utf-8"]
        fams = families(body)
        stats = info(c, "all")
        assert value(fams, "disque_jobs") == int(stats["registered_jobs"]) == 6
        assert value(fams, "disque_queues") == int(stats["registered_queues"])
        assert value(fams, "disque_connected_clients") == int(stats["connected_clients"])
        assert value(fams, "disque_queue_jobs", queue="orders") == c.call("QLEN", "orders") == 4
        qstat = dict(zip(*[iter(c.call("QSTAT", "orders"))] * 2))
        assert value(fams, "disque_queue_added", queue="orders") == qstat[b"jobs-in"] == 5
        assert value(fams, "disque_queue_removed", queue="orders") == qstat[b"jobs-out"] == 1
        assert value(fams, "disque_queue_paused", queue="mail", state="out") == 1
        assert value(fams, "disque_commands", command="addjob") == 6
        assert fams["disque_commands"].type == "counter" and fams["disque_jobs"].type == "gauge"
        assert value(fams, "disque_memory_max_bytes") == int(c.call("CONFIG", "GET", "maxmemory")[1])
        c.close()
    finally:
        node.stop()


def test_metrics_show_the_cluster(tmp_path):
    nodes = start_cluster(tmp_path, 2, args=["--set", "http-port=0", *FAST])
    port = free_port()
    try:
        extra = NodeProcess(tmp_path / "x", args=["--set", "http-port=%d" % port, *FAST]).start()
        assert call(extra, "CLUSTER", "MEET", "127.0.0.1", str(nodes[0].port)) == b"OK"
        import time

        deadline = time.time() + 20
        while time.time() < deadline:
            fams = families(get(port)[2])
            if value(fams, "disque_cluster_reachable_nodes") == 2:
                break
            time.sleep(0.2)
        assert value(fams, "disque_cluster_known_nodes") == 3
        peer_ids = {call(n, "HELLO")[1].decode() for n in nodes}
        assert {s.labels["node_id"] for s in fams["disque_cluster_peer_up"].samples} == peer_ids
        assert all(s.value == 1 for s in fams["disque_cluster_peer_up"].samples)
        nodes[1].kill()
        deadline = time.time() + 30
        while time.time() < deadline:
            fams = families(get(port)[2])
            down = [s for s in fams["disque_cluster_peer_up"].samples if s.value == 0]
            if down:
                break
            time.sleep(0.2)
        assert [s.labels["address"] for s in down] == ["127.0.0.1:%d" % nodes[1].port]
        extra.stop()
    finally:
        for n in nodes:
            n.kill()


def test_password_required(tmp_path):
    port = free_port()
    node = NodeProcess(tmp_path / "n", args=["--set", "http-port=%d" % port, "--requirepass", "pw"]).start()
    try:
        assert get(port)[0] == 401
        assert get(port, auth=("prometheus", "wrong"))[0] == 401
        code, _, body = get(port, auth=("prometheus", "pw"))
        assert code == 200 and b"disque_jobs" in body
        assert get(port, headers={"Authorization": "Bearer pw"})[0] == 200
    finally:
        node.stop()


def api(port, path, method="GET", payload=None, password=None, action=True):
    """(status, JSON) of one API request with treq."""
    import json

    headers = {}
    if password:
        headers["Authorization"] = "Bearer %s" % password
    if method == "POST" and action:
        headers["X-Disque-Action"] = "1"

    def fetch():
        url = "http://127.0.0.1:%d%s" % (port, path)
        if method == "POST":
            d = treq.post(url, json=payload or {}, headers=headers, reactor=reactor())
        else:
            d = treq.get(url, headers=headers, reactor=reactor())
        return d.addCallback(lambda r: treq.content(r).addCallback(lambda body: (r.code, json.loads(body))))
    return run(fetch)


def wait_for(predicate, timeout=30.0, step=0.2):
    import time

    deadline = time.time() + timeout
    while True:
        result = predicate()
        if result or time.time() > deadline:
            return result
        time.sleep(step)


def count(fams, histogram):
    [sample] = [s for s in fams[histogram].samples if s.name == histogram + "_count"]
    return sample.value


def test_histograms_and_counters_match_what_was_done(tmp_path):
    port = free_port()
    node = NodeProcess(tmp_path / "n", args=["--set", "http-port=%d" % port]).start()
    try:
        c = node.client()
        ids = [c.call("ADDJOB", "q", "j%d" % i, "0").decode() for i in range(6)]
        for _ in range(4):
            c.call("GETJOB", "FROM", "q")
        c.call("GETJOB", "TIMEOUT", "300", "FROM", "empty")  # blocks 300 ms, then times out
        c.call("ACKJOB", ids[0], ids[1])
        c.call("FASTACK", ids[2])
        c.call("NACK", ids[3])
        fams = families(get(port)[2])
        wait = {s.labels.get("le"): s.value for s in fams["disque_getjob_wait_seconds"].samples
                if s.name.endswith("_bucket")}
        assert wait["0.001"] == 4 and wait["0.25"] == 4 and wait["0.5"] == 5 and wait["+Inf"] == 5
        assert count(fams, "disque_job_add_to_ack_seconds") == 3
        assert count(fams, "disque_addjob_replication_seconds") == 0  # one node: no copies to wait for
        assert value(fams, "disque_queue_acks", queue="q") == 3 and value(fams, "disque_acks") == 3
        assert value(fams, "disque_queue_nacks", queue="q") == 1 and value(fams, "disque_nacks") == 1
        states = {s.labels["state"]: s.value for s in fams["disque_jobs_by_state"].samples}
        assert states == {"wait-repl": 0, "active": 0, "queued": 3, "acked": 0}
        assert sum(states.values()) == int(info(c, "jobs")["registered_jobs"])
        status, body = api(port, "/api/queues/q")
        assert status == 200 and body["queue"]["len"] == c.call("QLEN", "q") == 3
        assert [j["id"] for j in body["jobs"]] == [job[1].decode() for job in c.call("QPEEK", "q", "3")]
        show = dict(zip(*[iter(c.call("SHOW", ids[3]))] * 2))
        job = api(port, "/api/jobs/" + ids[3])[1]
        assert job["nacks"] == show[b"nacks"] == 1 and job["state"] == show[b"state"].decode() == "queued"
        c.close()
    finally:
        node.stop()


def test_the_api_on_a_three_node_cluster(tmp_path):
    http = [free_port() for _ in range(3)]
    nodes = [NodeProcess(tmp_path / ("n%d" % i), args=["--set", "http-port=%d" % http[i], "--requirepass", "pw", *FAST])
             for i in range(3)]
    try:
        for n in nodes:
            n.start()
        for n in nodes[1:]:
            c = n.client()
            c.call("AUTH", "pw")
            assert c.call("CLUSTER", "MEET", "127.0.0.1", str(nodes[0].port)) == b"OK"
            c.close()

        def all_up():
            status, body = api(http[0], "/api/nodes", password="pw")
            return status == 200 and len(body["nodes"]) == 3 and all(n["up"] and n["connected"] for n in body["nodes"])
        assert wait_for(all_up)
        assert api(http[0], "/api/nodes")[0] == 401  # no password
        c0 = nodes[0].client()
        c0.call("AUTH", "pw")
        job_id = c0.call("ADDJOB", "q", "replicated", "0", "REPLICATE", "3").decode()
        fams = families(get(http[0], headers={"Authorization": "Bearer pw"})[2])
        assert count(fams, "disque_addjob_replication_seconds") == 1
        # PAUSE with bcast from the page reaches every node.
        status, body = api(http[0], "/api/queues/q/pause", "POST", {"state": "out", "bcast": True}, password="pw")
        assert status == 200 and body["queue"]["paused"] == "out"
        clients = [n.client() for n in nodes]
        for c in clients:
            c.call("AUTH", "pw")
        assert wait_for(lambda: all(c.call("PAUSE", "q", "state") == b"out" for c in clients), 10)
        # Deleting a job from the page acknowledges it everywhere.
        assert all(c.call("SHOW", job_id) is not None for c in clients)
        assert api(http[0], "/api/jobs/%s/delete" % job_id, "POST", password="pw") == (200, {"deleted": 1})
        assert wait_for(lambda: all(c.call("SHOW", job_id) is None for c in clients), 15)
        # The cluster view: the nodes' queues summed, over the bus, and each
        # peer's dashboard address.
        for i, c in enumerate(clients):
            for _ in range(i + 1):
                c.call("ADDJOB", "summed", "x", "0", "REPLICATE", "1")
        status, view = api(http[0], "/api/cluster", password="pw")
        assert status == 200 and view["complete"] is True
        [summed] = [q for q in view["queues"] if q["name"] == "summed"]
        assert summed["len"] == summed["added"] == 6 and sorted(summed["nodes"].values()) == [1, 2, 3]
        assert sorted(n["dashboard"] or "" for n in view["nodes"]) == \
            ["", "http://127.0.0.1:%d/" % http[1], "http://127.0.0.1:%d/" % http[2]]
        assert api(http[0], "/api/cluster")[0] == 401  # no password
        # A killed node is shown down, and unreachable in the cluster view.
        nodes[2].kill()

        def third_unreachable():
            view = api(http[0], "/api/cluster", password="pw")[1]
            return not view["complete"] and view
        view = wait_for(third_unreachable, 10)
        assert [n["answer"] for n in view["nodes"] if n["address"] == "127.0.0.1:%d" % nodes[2].port] == ["unreachable"]
        [summed] = [q for q in view["queues"] if q["name"] == "summed"]
        assert summed["len"] == 3

        def third_down():
            rows = api(http[0], "/api/nodes", password="pw")[1]["nodes"]
            return [r for r in rows if not r["up"]]
        [down] = wait_for(third_down, 30)
        assert down["address"] == "127.0.0.1:%d" % nodes[2].port
        for c in clients[:2]:
            c.close()
    finally:
        for n in nodes:
            n.kill()


def test_https_with_the_nodes_certificate(tmp_path):
    import base64
    import ssl
    import urllib.error
    import urllib.request

    from tests.support.tls import client_context, make_pki

    pki = make_pki(tmp_path / "pki")
    port = free_port()
    node = NodeProcess(tmp_path / "n", args=["--set", "http-port=%d" % port, "--set", "http-tls=yes",
                                             "--set", "tls-cert-file=%s" % pki.node,
                                             "--set", "tls-key-file=%s" % pki.node_key,
                                             "--requirepass", "pw"]).start()
    try:
        url = "https://127.0.0.1:%d/api/node" % port
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, context=client_context(ca=pki.ca), timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": "Basic " + base64.b64encode(b"x:pw").decode()})
        with urllib.request.urlopen(request, context=client_context(ca=pki.ca), timeout=10) as r:
            assert r.status == 200 and b'"actions":true' in r.read()
        with pytest.raises(urllib.error.URLError) as untrusted:  # a client trusting another CA
            urllib.request.urlopen(url, context=client_context(ca=pki.other_ca), timeout=10)
        assert isinstance(untrusted.value.reason, ssl.SSLError)
        with pytest.raises(Exception):  # plain HTTP on the HTTPS port gets nothing
            urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5).read()
    finally:
        node.stop()
