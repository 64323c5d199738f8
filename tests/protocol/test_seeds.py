"""``cluster-seeds`` through a real node service: what the log says about
a seed that does not answer, and seeds joining by the closed bus's rules
between real nodes in memory (disque.testing.IOSimCluster).  The loop
itself is tested on pure cores in tests/sim/test_seeds.py, real processes
in tests/process/test_e2e_seeds.py."""

import re

from disque.testing import IOSimCluster
from tests.support.memory import captured_log, texts


def fields(text):
    return dict(line.split(b":", 1) for line in text.split(b"\r\n") if b":" in line)


def test_a_seed_that_does_not_answer_is_logged_once_a_minute(make):
    node = make(**{"cluster-seeds": "127.0.0.1:7712"})  # nobody there: the link never comes up
    with captured_log() as events:
        node.advance(150)
    lines = [t for t in texts(events) if "Seed" in t]
    # Tries at 0, 1, 3, 7, 15, 31, 61, 91 and 121 s: 8 lines' worth (not the
    # first), a line a minute at most.
    assert lines[0] == "Seed 127.0.0.1:7712 not joined yet: no answer on its bus port 17712 (2 tries); next try in 2 s"
    assert 2 <= len(lines) <= 3
    folded = [int(re.search(r"\((\d+) more like it not logged in the last minute\)$", t).group(1)) for t in lines[1:]]
    assert 1 + len(folded) + sum(folded) <= 8 and folded[0] >= 3  # (3 tries within the first minute)


def test_seeds_join_only_by_the_closed_bus(tmp_path):
    """A node whose seed does not know the cluster-password never gets in
    (the handshake fails, counted); once the seed has the same password the
    next try joins them, within 30 s."""
    cluster = IOSimCluster(2, tmp_path, overrides={"cluster-password": "s3cret"})
    try:
        a, b = cluster.client(0), cluster.client(1)
        assert b.call("CONFIG", "SET", "cluster-password", "another") == b"OK"
        assert a.call("CONFIG", "SET", "cluster-seeds", "127.0.0.1:%d" % cluster.ports[1]) == b"OK"
        cluster.advance(40)
        for client in (a, b):
            info = fields(client.call("CLUSTER", "INFO"))
            assert (info[b"cluster_size"], info[b"cluster_reachable_nodes"]) == (b"1", b"0")
        assert int(fields(b.call("INFO", "STATS"))[b"bus_auth_failures"]) > 0
        assert b.call("CONFIG", "SET", "cluster-password", "s3cret") == b"OK"
        cluster.advance(31)
        for client in (a, b):
            assert fields(client.call("CLUSTER", "INFO"))[b"cluster_reachable_nodes"] == b"1"
    finally:
        cluster.stop()
