"""Membership, gossip and failure detection on pure cores wired in memory
(disque.testing.SimCluster): deterministic, fake clock, no sockets."""

import pytest
from hypothesis import given, settings, strategies as st

from disque.core import effects
from disque.core import messages
from disque.core.node_file_format import parse_nodes_file
from disque.testing import HOST, SimCluster


def full_mesh(sim):
    n = len(sim.nodes)
    return all(node.cluster.size == n and node.cluster.reachable == n - 1 for node in sim.nodes)


@pytest.mark.parametrize("n", [2, 3, 7])
def test_a_chain_of_meets_becomes_a_full_mesh(n):
    sim = SimCluster(n, seed=n)
    sim.chain_meet()
    sim.settle(3000)
    assert full_mesh(sim)
    ids = {node.my_id for node in sim.nodes}
    for node in sim.nodes:
        assert set(node.cluster.nodes) == ids
        assert not any(p.handshake for p in node.cluster.peers())


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6), st.randoms(use_true_random=False), st.data())
def test_any_spanning_set_of_meets_completes_the_mesh(n, rnd, data):
    """Meeting one node of a cluster is enough, whichever side meets."""
    sim = SimCluster(n, seed=rnd.randint(0, 10**6))
    for i in range(1, n):
        j = data.draw(st.integers(0, i - 1))
        a, b = (i, j) if data.draw(st.booleans()) else (j, i)
        sim.call(a, "cluster.meet", HOST, sim.ports[b], sim.now, True)
    sim.settle(5000)
    assert full_mesh(sim)


def test_a_join_is_announced_to_the_other_members_at_the_next_cron():
    """Two MEETs at once (0 meets 1, 1 meets 2): 1's handshake with 2 ends
    before 1 knows 0, so nothing 2 hears names 0.  1 announces each join to
    the members it has at the next cron (100 ms), instead of their next
    regular PING (1 s): the mesh is complete within that."""
    for run in range(20):
        sim = SimCluster(3, seed=run)
        for i in (0, 1):
            sim.nodes[i].set_time(sim.now)
            sim.nodes[i].cluster.meet(HOST, sim.ports[i + 1], sim.now, True)
        sim._drain(0)
        sim._drain(1)
        sim.pump()
        waited = 0
        while not full_mesh(sim):
            assert waited < 200, run
            sim.advance(100)
            waited += 100


def test_meet_starts_a_handshake_with_a_temporary_id():
    sim = SimCluster(2)
    sim.kill(1)  # nobody answers
    sim.call(0, "cluster.meet", HOST, sim.ports[1], sim.now, True)
    c = sim.nodes[0].cluster
    (temp,) = c.peers()
    assert temp.handshake and temp.id != sim.nodes[1].my_id
    assert (c.size, len(c.nodes), c.reachable) == (1, 2, 0)
    sim.advance(16000)  # handshake timeout (node timeout)
    assert c.peers() == []


def test_meeting_a_known_address_is_a_no_op():
    sim = SimCluster(2)
    sim.chain_meet()
    sim.settle()
    before = dict(sim.nodes[0].cluster.nodes)
    sim.call(0, "cluster.meet", HOST, sim.ports[1], sim.now, True)
    assert sim.nodes[0].cluster.nodes == before


def test_pong_with_an_id_already_known_drops_the_duplicate_handshake():
    sim = SimCluster(2)
    sim.chain_meet()
    sim.settle()
    c = sim.nodes[0].cluster
    c.meet(b"127.0.0.2", sim.ports[1], sim.now)  # another address, same node
    temp = [p for p in c.peers() if p.handshake][0]
    # Answer as node 1 would on that link: a PONG carrying node 1's real ID.
    from disque.testing import SimLink
    fake = SimLink(0, temp.id, b"127.0.0.2")
    sim.nodes[0].bus_receive(sim.nodes[1].cluster.header(), messages.Pong(()), fake)
    assert temp.id not in c.nodes and len(c.nodes) == 2
    assert effects.Unlink(temp.id) in sim.nodes[0].outbox


def test_failure_detection_pfail_then_fail_then_recovery():
    sim = SimCluster(3, node_timeout=2000)
    sim.chain_meet()
    sim.settle()
    sim.kill(2)
    dead = sim.nodes[2].my_id
    sim.advance(1500)
    assert not sim.nodes[0].cluster.nodes[dead].pfail  # within the timeout
    sim.advance(2000)
    for i in (0, 1):
        peer = sim.nodes[i].cluster.nodes[dead]
        assert peer.pfail and peer.fail, i  # 2 of 3 agree: a majority
        assert sim.nodes[i].cluster.reachable == 1
    assert any(isinstance(m, messages.Fail) and m.node_id == dead for _, _, m in sim.delivered)
    # It comes back (same identity): the first PONG clears both flags.
    sim.revive(2)
    sim.advance(3000)
    for i in (0, 1):
        peer = sim.nodes[i].cluster.nodes[dead]
        assert not peer.pfail and not peer.fail
    assert full_mesh(sim)



def test_failure_and_recovery_are_one_notice_each_per_survivor():
    """What operators read: one line when a peer is flagged as failing and
    one when it is back, however long it stays down."""
    sim = SimCluster(3, node_timeout=2000)
    sim.chain_meet()
    sim.settle()
    assert sim.notices and all("join" in t for _, t in sim.notices), sim.notices  # (tests/sim/test_bus_strangers.py)
    sim.notices.clear()
    sim.kill(2)
    short = sim.nodes[2].my_id[:8].decode()
    sim.advance(20000)
    failing = [(i, t) for i, t in sim.notices if short in t and "flagged as failing" in t]
    assert sorted(i for i, _ in failing) == [0, 1], sim.notices
    sim.revive(2)
    sim.advance(3000)
    back = [(i, t) for i, t in sim.notices if short in t and "reachable again" in t]
    assert sorted(i for i, _ in back) == [0, 1], sim.notices
    assert len(sim.notices) == 4, sim.notices


def test_a_returning_peer_is_reachable_from_its_first_message_until_it_is_silent_for_the_timeout():
    """A peer flagged FAIL restarts and is killed again before our own link
    reached it: only its first PING (on the link it opens at start-up) got
    to us.  That clears its flags, and it counts as reachable for
    ``node_timeout`` from that word, as after a PONG, not only until our
    next cron: an ADDJOB asking every node for a copy meanwhile waits for
    the copy (and gets it when the peer is back) instead of answering
    NOREPL.  (Found with the original's test suite; the same with real
    processes: test_e2e_cluster.py.)"""
    sim = SimCluster(3, node_timeout=2000)
    sim.chain_meet()
    sim.settle()
    sim.kill(2)
    back = sim.nodes[2].my_id
    sim.advance(5000)
    assert all(sim.nodes[i].cluster.nodes[back].fail for i in (0, 1))
    sim.revive(2)  # its links come up at once: its PING reaches 0 and 1
    sim.kill(2)  # and it is gone before theirs reconnected
    for i in (0, 1):
        peer = sim.nodes[i].cluster.nodes[back]
        assert not (peer.pfail or peer.fail or peer.connected), i
    sim.advance(500)  # a few crons (every 100 ms) of silence, well within the timeout
    assert [n.cluster.reachable for n in sim.nodes[:2]] == [2, 2]
    node = sim.nodes[0]
    node.set_time(sim.now)
    job = node.addjob.add(b"q", b"body", 3, 0, -1, 3600, 0, False)
    handle = object()
    node.addjob.await_replication(job, handle, 30000, b"OK", b"NOREPL")
    sim._drain(0)
    sim.pump()
    answers = [payload for _, h, payload in sim.replies if h is handle]
    assert answers == []  # waiting for the copy on node 2
    sim.advance(1600)  # silent for the whole timeout now: suspected again
    assert node.cluster.nodes[back].pfail and node.cluster.reachable == 1
    sim.revive(2)
    sim.advance(300)
    answers = [payload for _, h, payload in sim.replies if h is handle]
    assert answers == [b"OK"]
    assert all(job.id in n.jobs for n in sim.nodes)


def test_a_minority_cannot_fail_a_node_alone():
    sim = SimCluster(5, node_timeout=1000)
    sim.chain_meet()
    sim.settle()
    target = sim.nodes[4].my_id
    sim.partition({0, 1, 2, 3}, {1, 2, 3, 4})  # only nodes 0 and 4 lose each other
    sim.advance(5000)
    peer = sim.nodes[0].cluster.nodes[target]
    assert peer.pfail and not peer.fail
    for i in (1, 2, 3):
        assert not sim.nodes[i].cluster.nodes[target].pfail


def test_forget_drops_the_node_and_ignores_gossip_about_it_for_a_while():
    sim = SimCluster(3)
    sim.chain_meet()
    sim.settle()
    gone = sim.nodes[2].my_id
    assert sim.call(0, "cluster.forget", gone, sim.now)
    sim.advance(5000)  # node 1 keeps gossiping about node 2
    assert gone not in sim.nodes[0].cluster.nodes
    assert not sim.call(0, "cluster.forget", gone, sim.now)
    sim.advance(60000)  # the blacklist expires: gossip brings it back
    assert gone in sim.nodes[0].cluster.nodes


def test_reset_hard_takes_a_new_id_and_drops_jobs():
    sim = SimCluster(2)
    sim.chain_meet()
    sim.settle()
    node = sim.nodes[0]
    node.set_time(sim.now)
    node.addjob.add(b"q", b"body", 1, 0, -1, 3600, 0, False)
    old = node.my_id
    sim.call(0, "cluster_reset", True)
    assert node.my_id != old and node.cluster.size == 1 and len(node.jobs) == 0
    job = node.addjob.add(b"q", b"body", 1, 0, -1, 3600, 0, False)
    assert job.id[2:10] == node.my_id[:8] and job.delivered == (node.my_id,)


def test_reset_soft_keeps_the_id():
    sim = SimCluster(2)
    sim.chain_meet()
    sim.settle()
    old = sim.nodes[0].my_id
    sim.call(0, "cluster_reset", False)
    assert sim.nodes[0].my_id == old and sim.nodes[0].cluster.size == 1


def test_leaving_is_advertised_by_every_message():
    sim = SimCluster(3)
    sim.chain_meet()
    sim.settle()
    sim.call(1, "cluster.set_leaving", True)
    sim.advance(1500)
    me = sim.nodes[1].my_id
    assert sim.nodes[0].cluster.nodes[me].leaving and sim.nodes[2].cluster.nodes[me].leaving
    sim.call(1, "cluster.set_leaving", False)
    sim.advance(1500)
    assert not sim.nodes[0].cluster.nodes[me].leaving


def test_node_file_round_trip():
    sim = SimCluster(3)
    sim.chain_meet()
    sim.settle()
    c = sim.nodes[0].cluster
    c.set_leaving(True)
    my_id, leaving, peers = parse_nodes_file(c.nodes_file_text())
    assert my_id == c.my_id and leaving
    assert sorted(p[0] for p in peers) == sorted(n.my_id for n in sim.nodes[1:])
    assert all(p[1] == HOST for p in peers)


@pytest.mark.parametrize("text, error", [
    (b"", "no 'myself'"),
    (b"zz 127.0.0.1:7711 myself\n", "bad node ID"),
    (b"%s 127.0.0.1:99999 myself\n" % (b"a" * 40), "bad address"),
    (b"%s 127.0.0.1:7711 myself,weird\n" % (b"a" * 40), "unknown flags"),
    (b"%s 127.0.0.1:7711 myself\n%s 127.0.0.1:7712 myself\n" % (b"a" * 40, b"b" * 40), "second"),
    (b"%s 127.0.0.1:7711\n" % (b"a" * 40), "expected"),
])
def test_bad_node_files_are_refused_with_a_reason(text, error):
    with pytest.raises(ValueError, match=error):
        parse_nodes_file(text)


def test_unknown_senders_are_ignored_except_meet():
    sim = SimCluster(2)
    stranger = sim.nodes[1]
    from disque.testing import SimLink
    link = SimLink(0, None, HOST)
    sim.nodes[0].bus_receive(stranger.cluster.header(), messages.Ping(()), link)
    assert stranger.my_id not in sim.nodes[0].cluster.nodes
    sim.nodes[0].bus_receive(stranger.cluster.header(), messages.DelJob(b"x" * 40), link)
    assert stranger.my_id not in sim.nodes[0].cluster.nodes
    sim.nodes[0].bus_receive(stranger.cluster.header(), messages.Meet(()), link)
    assert stranger.my_id in sim.nodes[0].cluster.nodes  # a claim, in handshake (tests/sim/test_bus_strangers.py)
    assert not sim.nodes[0].cluster.is_member(stranger.my_id)


@pytest.mark.parametrize("sender,host,port", [
    (b"\xff" * 40, b"", 7001),  # not hex: the node file would refuse its own line
    (b"A" * 40, b"", 7001),  # upper case: same
    (b"a" * 40, b"host name\n", 7001),  # splits the node file's line
    (b"a" * 40, b"\xff\xfe", 7001),  # not ASCII: the link's host.decode() raised
    (b"a" * 40, b"a" * 64 + b".b", 7001),  # a DNS label > 63: the link's idna encoding raised
    (b"a" * 40, b"", 0),  # no such client port
    (b"a" * 40, b"", 60000),  # its bus port (+10000) does not exist
])
def test_meet_from_a_malformed_id_or_address_adds_nothing_and_the_node_file_stays_loadable(sender, host, port):
    """Found by tests/tools/fuzz.py: a MEET carrying these was added as a node,
    its line written to the node file, and the node then refused to start
    ("bad node ID", "bad address") or the link set-up raised."""
    sim = SimCluster(1)
    from disque.testing import SimLink
    node = sim.nodes[0]
    node.bus_receive(messages.Header(sender, host, port, 0), messages.Meet(()), SimLink(0, None, HOST))
    assert list(node.cluster.nodes) == [node.my_id]
    assert not any(type(e) is effects.Link for e in node.outbox)
    parse_nodes_file(node.cluster.nodes_file_text())


def test_gossip_with_malformed_addresses_starts_no_handshake_and_a_pong_with_a_bad_id_completes_none():
    sim = SimCluster(2)
    sim.chain_meet()
    sim.settle()
    a, b = sim.nodes
    from disque.testing import SimLink
    link = SimLink(0, None, HOST)
    bad = (messages.Gossip(b"c" * 40, b"host name", 7005, 0), messages.Gossip(b"d" * 40, b"\xff", 7006, 0),
           messages.Gossip(b"e" * 40, b"127.0.0.1", 65000, 0))
    a.bus_receive(b.cluster.header(), messages.Ping(bad), link)
    assert set(a.cluster.nodes) == {a.my_id, b.my_id}
    # A handshake answered by a PONG whose sender ID is malformed is dropped.
    a.cluster.meet(b"127.0.0.1", 7010, sim.now)
    temp = next(n for n in a.cluster.nodes.values() if n.handshake)
    pending = SimLink(0, temp.id, HOST)
    a.bus_receive(messages.Header(b"Z" * 40, b"", 7010, 0), messages.Pong(()), pending)
    assert set(a.cluster.nodes) == {a.my_id, b.my_id}
    parse_nodes_file(a.cluster.nodes_file_text())
