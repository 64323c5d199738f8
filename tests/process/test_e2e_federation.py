"""Federation in real clusters: producers on one node, consumers on
another, with the default policy and with the third-party-style ``eager``
policy from examples/ (loaded from its own folder, nothing in disque/)."""

import os
import threading
import time

from tests.support.process import ROOT, call, start_cluster, wait_for

EAGER = os.path.join(ROOT, "examples", "federation-eager")


def blocking_get(node, queue, timeout_ms, out):
    c = node.client()
    try:
        out.append((c.call("GETJOB", "TIMEOUT", str(timeout_ms), "FROM", queue), time.time()))
    finally:
        c.close()


def test_low_traffic_job_reaches_a_consumer_on_another_node(trio):
    a, b, c = trio
    got = []
    t = threading.Thread(target=blocking_get, args=(b, "fq", 10000, got))
    t.start()
    time.sleep(0.3)
    job_id = call(a, "ADDJOB", "fq", "hello", "0", "REPLICATE", "1", "RETRY", "0")
    added = time.time()
    t.join(15)
    reply, at = got[0]
    assert reply is not None and reply[0][1] == job_id and reply[0][2] == b"hello"
    assert at - added < 4.5  # the second broadcast comes 4 s after the first, at most
    assert call(a, "SHOW", job_id) is None  # at most once: it moved
    stat = dict(zip(*[iter(call(b, "QSTAT", "fq"))] * 2))
    assert stat[b"import-from"] == [call(a, "CLUSTER", "MYID")]
    assert stat[b"import-rate"] >= 1
    assert call(b, "QSCAN", "IMPORTRATE", "1")[1] == [b"fq"]


def test_sustained_cross_node_traffic_counts_add_up(trio):
    a, b, c = trio
    n = 300
    made = []

    def produce():
        p = a.client()
        for i in range(n):
            made.append(p.call("ADDJOB", "sq", "job-%d" % i, "0", "REPLICATE", "1", "RETRY", "0"))
            time.sleep(0.005)
        p.close()

    producer = threading.Thread(target=produce)
    producer.start()
    consumer = b.client()
    got = []
    deadline = time.time() + 30
    while time.time() < deadline and (producer.is_alive() or len(got) < n):
        reply = consumer.call("GETJOB", "TIMEOUT", "300", "COUNT", "50", "FROM", "sq")
        if reply:
            got.extend(j[1] for j in reply)
        elif not producer.is_alive() and call(a, "QLEN", "sq") == 0:
            break
    consumer.close()
    producer.join()
    left = call(a, "QLEN", "sq")
    assert len(got) == len(set(got))  # no duplicates of at-most-once jobs
    assert len(got) + left == n and set(got) <= set(made)
    assert len(got) >= n * 0.9  # the consumer was fed, not starved


def test_a_queue_paused_in_output_is_not_a_source(trio):
    a, b, c = trio
    assert call(a, "PAUSE", "pq", "out") == b"out"
    job_id = call(a, "ADDJOB", "pq", "x", "0", "REPLICATE", "1")
    assert call(b, "GETJOB", "TIMEOUT", "2500", "FROM", "pq") is None
    call(a, "PAUSE", "pq", "none")
    reply = call(b, "GETJOB", "TIMEOUT", "5000", "FROM", "pq")
    assert reply[0][1] == job_id


def test_the_eager_example_policy_runs_a_cluster_without_touching_disque(tmp_path):
    env = {"PYTHONPATH": EAGER}
    nodes = start_cluster(tmp_path, 3, args=("--federation-policy", "eager:interval=50"), env=env)
    try:
        a, b, c = nodes
        assert call(b, "CONFIG", "GET", "federation-policy") == [b"federation-policy", b"eager:interval=50"]
        for i in range(4):  # a queue of 4 on A
            call(a, "ADDJOB", "eq", "job-%d" % i, "0", "REPLICATE", "1", "RETRY", "0")
        t = time.time()
        first = call(b, "GETJOB", "TIMEOUT", "5000", "FROM", "eq")
        assert first is not None and time.time() - t < 1.5
        got = {first[0][1]}
        wait_for(lambda: got.update(j[1] for j in (call(b, "GETJOB", "NOHANG", "COUNT", "4", "FROM", "eq") or []))
                 or len(got) == 4, timeout=5, what="all four on B")
    finally:
        for n in nodes:
            n.kill()


def test_unknown_policy_stops_start_up_with_one_line(tmp_path):
    from tests.support.process import run_twistd
    rc, out = run_twistd(["--federation-policy", "nope"], tmp_path)
    assert rc != 0 and "nope" in out and "Traceback" not in out
