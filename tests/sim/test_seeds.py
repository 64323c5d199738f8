"""The seeds (``cluster-seeds``, disque.core.seeds) on pure cores wired in
memory with one fake clock (disque.testing.SimCluster): each node is given
the seeds as the runtime gives them at start-up (``cluster.seeds.configure``),
and nobody runs CLUSTER MEET."""

from disque.core.seeds import MAX_RETRY_MS
from disque.testing import HOST, SimCluster

NOBODY = 7999  # a port no node of the SimCluster listens on


def full_mesh(sim, nodes=None):
    nodes = sim.nodes if nodes is None else nodes
    n = len(nodes)
    return all(node.cluster.size == n and node.cluster.reachable == n - 1 for node in nodes)


def seed(sim, i, *ports):
    """Give node ``i`` the seeds at ``ports`` (of HOST), from now."""
    sim.nodes[i].cluster.seeds.configure([(HOST, port) for port in ports], sim.now)


def texts(sim, i, part):
    return [t for j, t in sim.notices if j == i and part in t]


def run_until(sim, predicate, limit_ms, step=100):
    """Advance until ``predicate()``; the simulated ms it took (None if not
    within ``limit_ms``)."""
    waited = 0
    while not predicate():
        if waited >= limit_ms:
            return None
        sim.advance(step)
        waited += step
    return waited


def handshake_times(sim, i, port, ms):
    """Advance ``ms``; the times (ms from now) at which node ``i`` starts a
    new handshake with ``port``."""
    start, times = sim.now, []
    seen = set(sim.nodes[i].cluster.nodes)
    for _ in range(ms // 100):
        sim.advance(100)
        for n in sim.nodes[i].cluster.nodes.values():
            if n.handshake and n.port == port and n.id not in seen:
                seen.add(n.id)
                times.append(sim.now - start)
    return times


def try_times(sim, i, ms):
    """Advance ``ms``; the times (ms from now) of node ``i``'s tries of its
    first seed."""
    start, times = sim.now, []
    first = sim.nodes[i].cluster.seeds.seeds[0]
    tries = first.tries
    for _ in range(ms // 100):
        sim.advance(100)
        if first.tries != tries:
            tries = first.tries
            times.append(sim.now - start)
    return times


def test_three_nodes_with_the_same_seeds_form_a_cluster_without_a_meet():
    sim = SimCluster(3, seed=1)
    for i in range(3):
        seed(sim, i, *sim.ports)  # each list names the node itself too
    assert run_until(sim, lambda: full_mesh(sim), 1000) is not None
    # Node 0 tried every seed at its first cron, itself too (the others were
    # in before theirs); every node logs each join, with the address.
    assert texts(sim, 0, "Seed") == ["Seed 127.0.0.1:7000 skipped: it answers as this node"]
    for i in range(3):
        joins = texts(sim, i, "joined the cluster")
        assert sorted(t.split()[2] for t in joins) == ["(127.0.0.1:%d)" % p for p in sim.ports if p != sim.ports[i]]
    sim.advance(1000)
    assert not any(n.cluster.seeds.active for n in sim.nodes)
    assert all(len(texts(sim, i, "In the cluster through seed")) == 1 for i in range(3))


def test_a_node_started_later_joins_through_its_seeds():
    sim = SimCluster(3, seed=2)
    sim.chain_meet()
    sim.settle()
    sim.add_node()
    seed(sim, 3, sim.ports[0])  # one seed is enough: gossip brings the rest
    assert run_until(sim, lambda: full_mesh(sim), 2000) is not None


def test_an_unreachable_seed_is_tried_with_a_backoff_up_to_30_s():
    sim = SimCluster(1, node_timeout=1000)  # handshakes expire after 1 s
    seed(sim, 0, NOBODY)
    times = try_times(sim, 0, 200_000)
    assert times == [100, 1100, 3100, 7100, 15100, 31100, 61100, 91100, 121100, 151100, 181100]  # (first cron: 100)
    assert all(b - a == MAX_RETRY_MS for a, b in zip(times[6:], times[7:]))
    # A try while the handshake of the one before is still on (1 s, or the
    # node timeout if longer) leaves it be: one at a time.
    seed(sim, 0, NOBODY)
    assert handshake_times(sim, 0, NOBODY, 200_000) == [100, 3100, 7100, 15100, 31100, 61100, 91100, 121100,
                                                        151100, 181100]


def test_each_try_after_the_first_is_a_keyed_notice_the_runtime_logs_once_a_minute():
    sim = SimCluster(1, node_timeout=1000)
    seed(sim, 0, NOBODY)
    sim.advance(10_000)
    lines = texts(sim, 0, "Seed 127.0.0.1:7999 not joined yet")
    assert lines[0] == "Seed 127.0.0.1:7999 not joined yet: no answer on its bus port 17999 (2 tries); next try in 2 s"
    assert len(lines) == 3  # the tries at 1 s, 3 s and 7 s
    # The core keys them by seed; disque.node.effects logs one a minute per
    # key (disque.io.log_limit): tests/protocol/test_seeds.py reads the log.
    node = SimCluster(1, node_timeout=1000).nodes[0]
    node.cluster.seeds.configure([(HOST, NOBODY)], node.now)
    for now in (node.now + 100, node.now + 1100):
        node.set_time(now)
        node.tick()
    (notice,) = [e for e in node.outbox if getattr(e, "key", None)]
    assert notice.key == ("seed", HOST, NOBODY)


def test_a_seed_that_names_this_node_is_skipped_without_a_handshake():
    sim = SimCluster(2, node_timeout=1000)
    sim.nodes[0].cluster.own_hosts = frozenset((HOST,))  # the runtime gives its bind addresses
    seed(sim, 0, sim.ports[0])
    sim.advance(5000)
    assert sim.nodes[0].cluster.peers() == []  # no handshake, not even with itself
    assert texts(sim, 0, "Seed") == ["Seed 127.0.0.1:7000 skipped: it is an address of this node"]
    assert not sim.nodes[0].cluster.seeds.active


def test_once_joined_through_one_seed_the_others_are_not_tried():
    sim = SimCluster(2, node_timeout=1000)
    seed(sim, 0, sim.ports[1], NOBODY)
    assert run_until(sim, lambda: full_mesh(sim), 1000) is not None
    sim.advance(500)
    assert texts(sim, 0, "In the cluster through seed") == [
        "In the cluster through seed 127.0.0.1:7001 (node %s): the seeds are not tried again until a restart or "
        "CONFIG SET cluster-seeds" % sim.nodes[1].my_id[:8].decode()]
    assert handshake_times(sim, 0, NOBODY, 120_000) == []


def test_a_node_restarted_from_its_node_file_is_in_at_once_without_a_handshake():
    sim = SimCluster(3, seed=3)
    for i in range(3):
        seed(sim, i, *sim.ports)
    sim.settle()
    claims = len(texts(sim, 0, "asks to join")) + len(texts(sim, 1, "asks to join"))
    node = sim.restart(2)
    seed(sim, 2, *sim.ports)
    assert run_until(sim, lambda: full_mesh(sim), 1000) is not None
    sim.advance(2000)
    assert not node.cluster.seeds.active
    assert len(texts(sim, 2, "In the cluster through seed")) == 2  # (one before the restart)
    # A MEET of its first try may reach a peer before that peer's link to it
    # is back: taken as a PING from a member, not as a claim.
    assert len(texts(sim, 0, "asks to join")) + len(texts(sim, 1, "asks to join")) == claims
    assert not any(n.handshake for i in range(3) for n in sim.nodes[i].cluster.nodes.values())


def test_a_node_restarted_without_its_node_file_joins_again_through_its_seeds():
    sim = SimCluster(3, seed=4)
    for i in range(3):
        seed(sim, i, *sim.ports)
    sim.settle()
    old_id = sim.nodes[2].my_id
    node = sim.restart(2, node_file=False)
    assert node.my_id != old_id and node.cluster.peers() == []
    seed(sim, 2, *sim.ports)
    assert run_until(sim, lambda: node.cluster.reachable == 2 and all(
        n.cluster.is_member(node.my_id) for n in sim.nodes[:2]), 1000) is not None


def test_a_node_the_cluster_forgot_comes_back_through_its_seeds_after_the_ban():
    """Restarted from its node file, it knows its peers, and they answer
    its PINGs, but they forgot it: its seeds send MEET on its links again,
    refused while their CLUSTER FORGET holds (60 s), taken after."""
    sim = SimCluster(3, seed=5)
    for i in range(3):
        seed(sim, i, *sim.ports)
    sim.settle()
    gone = sim.nodes[2].my_id
    sim.kill(2)
    forgot_at = sim.now
    for i in (0, 1):
        assert sim.call(i, "cluster.forget", gone, sim.now)
    sim.advance(5000)
    node = sim.restart(2)
    seed(sim, 2, *sim.ports)
    sim.advance(forgot_at + 59_000 - sim.now)
    assert node.cluster.reachable == 2  # it believes it is in...
    assert not any(n.cluster.is_member(gone) for n in sim.nodes[:2])  # ...but the ban holds
    assert texts(sim, 2, "does not take this node as a member")
    assert run_until(sim, lambda: all(n.cluster.is_member(gone) for n in sim.nodes[:2]), 40_000) is not None
    assert full_mesh(sim)


def test_a_seed_forgotten_here_is_not_taken_back_within_the_ban():
    """The handshakes the seeds start obey a CLUSTER FORGET of this node as
    gossip's do (an operator's CLUSTER MEET does not)."""
    sim = SimCluster(2, seed=6)
    sim.chain_meet()
    sim.settle()
    other = sim.nodes[1].my_id
    assert sim.call(0, "cluster.forget", other, sim.now)
    forgot_at = sim.now
    seed(sim, 0, sim.ports[1])  # (CONFIG SET cluster-seeds: the loop starts again)
    sim.advance(59_000)
    assert not sim.nodes[0].cluster.is_member(other)
    assert run_until(sim, lambda: sim.nodes[0].cluster.is_member(other), 40_000) is not None
    assert sim.now - forgot_at > 60_000
