"""Clusters without hand work, on real ``twistd -n disque`` processes:
nodes given ``cluster-seeds`` join by themselves (no CLUSTER MEET), and a
node restarted with or without its node file comes back by itself.  The
seed loop is tested on pure cores in tests/sim/test_seeds.py;
docs/cluster.md's recipe runs in tests/process/test_doc_cluster.py."""

import re

import pytest

from tests.support.process import NodeProcess, call, cluster_info, free_port, wait_for

FAST = ("--cluster-node-timeout", "1000")


def reachable(node):
    return int(cluster_info(node)["cluster_reachable_nodes"])


def seeded(tmp_path, ports, i, name="node%d", args=FAST):
    """Node ``i`` of ``ports``, with all of them as its seeds, in its dir."""
    seeds = " ".join("127.0.0.1:%d" % p for p in ports)
    return NodeProcess(tmp_path / (name % i), port=ports[i], args=(*args, "--set", "cluster-seeds=" + seeds))


@pytest.fixture
def seeded_trio(tmp_path):
    ports = [free_port() for _ in range(3)]
    nodes = [seeded(tmp_path, ports, i) for i in range(3)]
    yield nodes
    for node in nodes:
        node.kill()


def wait_all_reach(nodes, n, timeout=30):
    wait_for(lambda: all(reachable(node) == n for node in nodes), timeout=timeout, interval=0.1,
             what="every node reaching %d others" % n)


def test_three_nodes_with_seeds_form_a_cluster_without_a_meet(seeded_trio):
    for node in seeded_trio:  # all at once: each finds its seeds up, or tries again
        node.start(wait=False)
    for node in seeded_trio:
        node.wait_ready()
    wait_all_reach(seeded_trio, 2)
    ids = [call(node, "CLUSTER", "MYID").decode() for node in seeded_trio]
    assert call(seeded_trio[0], "CONFIG", "GET", "cluster-seeds")[1].decode().split() == [
        "127.0.0.1:%d" % node.port for node in seeded_trio]
    # Each join is logged on both sides, with the address; each node says
    # which seed got it in (once), and skipped itself if it tried itself.
    for i, node in enumerate(seeded_trio):
        def logged():
            log = node.log()
            return all("Node %s (127.0.0.1:%d) joined the cluster" % (ids[j][:8], other.port) in log
                       for j, other in enumerate(seeded_trio) if j != i) and "In the cluster through seed" in log
        wait_for(logged, timeout=10, what="node %d's log of the joins" % i)
        log = node.log()
        assert log.count("In the cluster through seed") == 1 and "Traceback" not in log


def test_a_restarted_node_rejoins_by_itself(seeded_trio, tmp_path):
    for node in seeded_trio:
        node.start()
    wait_all_reach(seeded_trio, 2)
    first, second, third = seeded_trio
    # kill -9, then the same command, the same dir: back from its node file
    # (its lock died with it).
    old_id = call(third, "CLUSTER", "MYID")
    third.kill()
    wait_for(lambda: reachable(first) == 1, timeout=30, what="the others noticing the kill")
    third.start()
    assert call(third, "CLUSTER", "MYID") == old_id
    wait_all_reach(seeded_trio, 2)
    # kill -9, and its dir lost: a new node (a new ID) on the same address,
    # which joins through its seeds.  The others keep the old ID, failing
    # (or suspected, if the new node joined before a majority agreed), until
    # CLUSTER FORGET.
    third.kill()
    fresh = seeded(tmp_path, [n.port for n in seeded_trio], 2, name="fresh%d")
    seeded_trio[2] = fresh
    fresh.start()
    new_id = call(fresh, "CLUSTER", "MYID")
    assert new_id != old_id
    wait_for(lambda: all(reachable(n) == 2 for n in seeded_trio), timeout=30, interval=0.1,
             what="the new node reaching the others and back")
    for node in (first, second):
        nodes = call(node, "CLUSTER", "NODES").decode()
        assert re.search(r"^%s 127\.0\.0\.1:%d noflags" % (new_id.decode(), fresh.port), nodes, re.M)
        # The old ID is suspected once node-timeout passes without its PONG
        # (the new node may have joined sooner): waited for, bounded.
        wait_for(lambda: re.search(r"^%s 127\.0\.0\.1:%d fail\?? " % (old_id.decode(), fresh.port),
                                   call(node, "CLUSTER", "NODES").decode(), re.M),
                 timeout=30, interval=0.1, what="the old ID suspected or failed")  # (fail or fail?)
        assert call(node, "CLUSTER", "FORGET", old_id) == b"OK"
        assert cluster_info(node)["cluster_known_nodes"] == "3"
