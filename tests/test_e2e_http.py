"""The HTTP side of real nodes with treq: /metrics parsed by the official
Prometheus parser, its values checked against INFO and QSTAT, and the
password required when requirepass is set."""

import treq
from prometheus_client.parser import text_string_to_metric_families

from support import NodeProcess, call, free_port, info, start_cluster
from txsupport import reactor, run


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
    nodes = start_cluster(tmp_path, 2, args=["--set", "http-port=0"])
    port = free_port()
    try:
        extra = NodeProcess(tmp_path / "x", args=["--set", "http-port=%d" % port]).start()
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
