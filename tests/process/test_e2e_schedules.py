"""Schedules on real clusters (docs/extensions.md): every run added once
while nodes are killed -9, paused and restarted (tests/tools/schedsoak.py,
short here; the long run's figures are in docs/reliability.md); a node
restarted without its files learns the schedules from the others; a
schedule changed on each side of a partition converges when it heals."""

import json
import os
import subprocess
import sys
import tempfile

import pytest

from tests.support.process import ROOT, call, wait_for
from tests.tools import netfilter
from tests.tools.faults import Cluster

NO_PARTITION = netfilter.unavailable()


def shown(node, name):
    reply = call(node, "SCHEDULE", "SHOW", name)
    return dict(zip(reply[::2], reply[1::2])) if isinstance(reply, list) else None


@pytest.fixture
def trio(request):
    base = 60 + (os.getpid() % 10) * 3
    cluster = Cluster(tempfile.mkdtemp(prefix="sched-"), ["127.0.0.%d" % (base + i) for i in range(3)],
                      ["--cluster-node-timeout", "2000"])
    yield cluster
    cluster.stop()


def test_every_run_is_added_once_while_nodes_die_pause_and_restart(tmp_path):
    out = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "-m", "tests.tools.schedsoak", "--seconds", "25", "--seed", "3",
                        "--json", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, timeout=300)
    assert out.exists(), p.stdout
    r = json.loads(out.read_text())
    assert r["missing"] == [] and r["doubled"] == {} and r["unknown"] == [], p.stdout
    assert r["crashes"] == [] and r["tracebacks"] == {}, p.stdout
    assert p.returncode == 0, p.stdout
    kinds = {e["kind"] for e in r["events"]}  # it ran, and the nemesis killed and paused nodes
    assert r["runs_owed"] >= 20 and kinds & {"kill", "both"} and kinds & {"stop", "both"}, p.stdout


def test_a_node_restarted_without_its_files_learns_the_schedules(trio):
    a, b, c = trio.nodes
    assert call(a, "SCHEDULE", "ADD", "nightly", "q", "x", "CRON", "0 3 * * *", "TZ", "Europe/Paris") == b"OK"
    wait_for(lambda: call(c, "SCHEDULE", "LIST") == [b"nightly"], timeout=10, what="the schedule on node 2")
    trio.kill([2])
    for name in os.listdir(c.workdir):  # its node file and any AOF: a fresh disk
        if not name.endswith(".log"):
            os.remove(os.path.join(c.workdir, name))
    trio.restart([2])
    assert call(c, "SCHEDULE", "LIST") == []  # a new node, in no cluster yet
    assert call(c, "CLUSTER", "MEET", a.host, str(a.port)) == b"OK"
    wait_for(lambda: call(c, "SCHEDULE", "LIST") == [b"nightly"], timeout=20, what="the schedule learned")
    assert shown(c, "nightly")[b"version"] == shown(a, "nightly")[b"version"]


@pytest.mark.skipif(NO_PARTITION is not None, reason="partitions need iptables rules: %s" % NO_PARTITION)
def test_a_change_on_each_side_of_a_partition_converges_after_it_heals(trio):
    a, b, c = trio.nodes
    assert call(a, "SCHEDULE", "ADD", "s", "q", "x", "EVERY", "60000") == b"OK"
    wait_for(lambda: all(call(n, "SCHEDULE", "LIST") == [b"s"] for n in trio.nodes), timeout=10,
             what="the schedule everywhere")
    with netfilter.Partitioner() as p:
        p.cut([trio.bus(0)], [trio.bus(1), trio.bus(2)])
        assert call(a, "SCHEDULE", "ADD", "s", "q", "minority", "EVERY", "20000") == b"OK"
        wait_for(lambda: shown(b, "s")[b"body"] == b"x" and shown(a, "s")[b"body"] == b"minority", timeout=5,
                 what="the change on node 0 only")
        assert call(c, "SCHEDULE", "ADD", "s", "q", "majority", "EVERY", "30000") == b"OK"  # later: it wins
        wait_for(lambda: shown(b, "s")[b"body"] == b"majority", timeout=10, what="the majority's change")
        assert shown(a, "s")[b"body"] == b"minority"
        p.heal()
        wait_for(lambda: all(shown(n, "s")[b"body"] == b"majority" for n in trio.nodes), timeout=30,
                 what="one version everywhere after the heal")
    versions = {shown(n, "s")[b"version"] for n in trio.nodes}
    assert len(versions) == 1


def test_the_blocking_client_manages_schedules_and_gets_their_runs(trio):
    from disque.client import BlockingClient, errors
    client = BlockingClient([(n.host, n.port) for n in trio.nodes])
    try:
        assert client.schedule_add("tick", "client-q", b"hi", every_ms=500, replicate=2, ttl=60) == "OK"
        assert client.schedules() == ["tick"]
        jobs = []
        wait_for(lambda: jobs.extend(client.get_jobs("client-q", count=10, timeout=200)) or len(jobs) >= 3,
                 timeout=20, what="three runs")
        assert all(j.body == b"hi" for j in jobs) and len({j.id for j in jobs}) == len(jobs)
        client.ack(*jobs)
        fields = client.schedule_show("tick", next=2)
        assert fields["when"] == "every 500 ms" and len(fields["next"]) == 2 and fields["runs"] >= 3
        assert client.schedule_pause("tick") == "OK" and client.schedule_show("tick")["state"] == "paused"
        assert client.schedule_del("tick") == 1 and client.schedules() == []
        with pytest.raises(errors.ResponseError, match="no such schedule"):
            client.schedule_show("tick")
    finally:
        client.close()
