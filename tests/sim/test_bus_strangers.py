"""Strangers on the bus, against pure cores wired in memory (SimCluster):
whoever reaches the bus port and speaks the protocol is not a member until
a link of ours to it is up and it answered there as the node it claims
(disque.core.membership).  Until then nothing it sends is acted on, it
counts nowhere and it is not saved; what it tries is logged (Notice
effects, a line a minute per key in the runtime).

The same on the wire: tests/protocol/test_bus_protocol.py (caps), test_iosim_cluster
(a real node in memory), tests/process/test_e2e_bus_closed.py (processes)."""

import pytest

from disque.core import effects, messages
from disque.core.errors import CommandError
from disque.core.handshake import MAX_CLAIMS
from disque.core.node_file_format import parse_nodes_file
from disque.testing import HOST, SimCluster, SimLink

FAKE = b"f" * 40  # the ID a stranger makes up
NOWHERE = b"10.9.9.9"  # the address it announces: nothing answers there
STRANGER_HOST = b"10.7.7.7"  # where its connection comes from


def from_stranger(node, msg, sender=FAKE):
    """``msg`` as a stranger's connection to ``node``'s bus port delivers
    it; returns the effects it caused."""
    node.outbox.clear()
    node.bus_receive(messages.Header(sender, NOWHERE, 7777, messages.H_EXTENSIONS), msg,
                     SimLink(0, None, STRANGER_HOST))
    out = node.outbox[:]
    node.outbox.clear()
    return out


def default_replicate(node):
    """ADDJOB's default REPLICATE (disque.commands.jobs): 3, or the cluster
    size if smaller."""
    return min(3, node.cluster.size)


def record(job_id=b"D-ffffffff-0123456789abcdefghijklmn-05a1", queue=b"q"):
    return messages.JobRecord(job_id, queue, b"planted", 1, 0, 10 ** 13, 0, 60, 0, 0, (FAKE,))


def test_a_meet_from_an_unknown_id_is_a_claim_that_counts_nowhere():
    sim = SimCluster(1)
    node = sim.nodes[0]
    node.set_time(sim.now)
    out = from_stranger(node, messages.Meet(()))
    claim = node.cluster.nodes[FAKE]
    assert claim.handshake and claim.claimed_from == STRANGER_HOST
    assert effects.Link(FAKE, NOWHERE, 7777) in out  # we link to it: only our link can prove it
    assert any(type(e) is effects.SendLink and type(e.message) is messages.Pong for e in out)  # answered
    cluster = node.cluster
    assert (cluster.size, cluster.reachable, cluster.active_peers()) == (1, 0, [])
    assert not cluster.is_member(FAKE)
    assert FAKE not in cluster.nodes_file_text()
    # A lone node's ADDJOB with the default REPLICATE works (it answered
    # -NOREPL when a MEET made the stranger a member), and the claim is no
    # copy: REPLICATE 2 cannot be met.
    assert default_replicate(node) == 1
    assert node.addjob.add(b"q", b"body", default_replicate(node), 0, -1, 3600, 0, False).delivered == (node.my_id,)
    with pytest.raises(CommandError) as e:
        node.addjob.add(b"q", b"body", 2, 0, -1, 3600, 0, False)
    assert e.value.args[0] == b"NOREPL"
    notices = [e for e in out if type(e) is effects.Notice]
    assert [n.key for n in notices] == [("meet", STRANGER_HOST)]
    assert notices[0].text == ("Node ffffffff (10.9.9.9:7777) asks to join (MEET from 10.7.7.7): it joins once "
                               "it answers as itself on a link of ours")
    # Nothing answers at the address it announced: the claim expires.
    sim.advance(16000)
    assert list(cluster.nodes) == [node.my_id]
    assert ("Node ffffffff (10.9.9.9:7777) asked to join (MEET from 10.7.7.7) and did not answer on a link of "
            "ours: not joined") in [t for _, t in sim.notices]
    assert parse_nodes_file(cluster.nodes_file_text())[2] == []


def test_a_claim_answered_by_another_id_is_dropped():
    """A MEET naming the address of a real node under a made-up ID: the
    real node answers our link as itself, and the claim goes."""
    sim = SimCluster(2)
    a, b = sim.nodes
    a.set_time(sim.now)
    a.bus_receive(messages.Header(FAKE, HOST, sim.ports[1], 0), messages.Meet(()), SimLink(0, None, HOST))
    sim._drain(0)
    sim.pump()  # the link to port 1 comes up at once: MEET, and B's PONG as B
    assert FAKE not in a.cluster.nodes and not a.cluster.is_member(b.my_id)
    assert any("answers as %s: not joined" % b.my_id[:8].decode() in t for i, t in sim.notices if i == 0)


def test_a_meet_from_a_real_node_joins_once_it_answers_our_link():
    """The handshake back, as real nodes do it: B's MEET makes it a claim
    on A, A's link to B gets B's PONG, and B is a member (a join logged)."""
    sim = SimCluster(2)
    a, b = sim.nodes
    sim.call(1, "cluster.meet", HOST, sim.ports[0], sim.now, True)
    assert a.cluster.is_member(b.my_id) and b.cluster.is_member(a.my_id)
    assert a.cluster.size == b.cluster.size == 2
    joined = [t for i, t in sim.notices if i == 0 and "joined" in t]
    assert joined == ["Node %s (127.0.0.1:%d) joined the cluster (it answered on our link to 127.0.0.1)"
                      % (b.my_id[:8].decode(), sim.ports[1])]


@pytest.fixture
def pair():
    """Two members, A holding a queued job with a copy on B; returns (sim,
    a, the job)."""
    sim = SimCluster(2)
    sim.chain_meet()
    sim.settle()
    a = sim.nodes[0]
    job = sim.call(0, "addjob.add", b"q", b"secret", 2, 0, -1, 3600, 0, False)
    sim.settle(200)
    assert job.id in sim.nodes[1].jobs
    return sim, a, job


def snapshot(node):
    """What a stranger's message must not change."""
    cluster = node.cluster
    return (sorted((j.id, j.state, j.body) for j in node.jobs.values()),
            sorted((q.name, len(q.jobs), q.flags) for q in node.queues.values()),
            sorted((n.id, n.handshake, n.pfail, n.fail, n.host, n.port) for n in cluster.nodes.values()),
            cluster.nodes_file_text(), cluster.size, cluster.reachable)


def stranger_messages(job_id, member_id):
    return [
        messages.NeedJobs(b"q", 10),  # hand over the queued jobs
        messages.SetAck(job_id, 2), messages.DelJob(job_id), messages.GotAck(job_id, True),  # delete it
        messages.YourJobs((record(),)), messages.ReplJob(record()),  # plant jobs
        messages.Fail(member_id),  # fail a member
        messages.Ping((messages.Gossip(b"e" * 40, b"10.8.8.8", 7000, 0),)),  # gossip: dial a new host
        messages.Pong((messages.Gossip(b"e" * 40, b"10.8.8.8", 7000, 0),)),
        messages.Queued(job_id, messages.COUNT_DELIVERY), messages.WillQueue(job_id), messages.Working(job_id),
        messages.Enqueue(job_id), messages.NackDelay(job_id, 10 ** 13, True),
        messages.Pause(b"q", 3),
    ]


@pytest.mark.parametrize("as_claim", [False, True], ids=["unknown", "claim"])
def test_nothing_a_non_member_sends_is_acted_on(pair, as_claim):
    """Each message a stranger could use (it took the queued jobs, deleted
    them, planted jobs, failed members and made the node dial any host when
    a MEET made it a member) changes nothing, whether its sender is unknown
    or a claim still in handshake; each kind is logged, keyed by its source
    address (but a claim's PING and PONG: its handshake)."""
    sim, a, job = pair
    member = sim.nodes[1].my_id
    if as_claim:
        from_stranger(a, messages.Meet(()))
        assert a.cluster.nodes[FAKE].handshake
    before = snapshot(a)
    for msg in stranger_messages(job.id, member):
        out = from_stranger(a, msg)
        assert snapshot(a) == before, msg
        assert not [e for e in out if type(e) in (effects.Send, effects.Link, effects.Unlink, effects.Rekey,
                                                  effects.Persist)], msg
        name = type(msg).__name__.upper()
        logged = [] if as_claim and name in ("PING", "PONG") else [  # (a handshake's own traffic)
            ("Ignored %s from node ffffffff (from 10.7.7.7): not a member of this cluster" % name,
             ("ignored", STRANGER_HOST, name))]
        assert [(n.text, n.key) for n in out if type(n) is effects.Notice] == logged, msg
    assert b"e" * 40 not in a.cluster.nodes


def test_a_stranger_claiming_our_own_id_or_a_forgotten_one_is_ignored(pair):
    sim, a, job = pair
    before = snapshot(a)
    assert [type(e) for e in from_stranger(a, messages.DelJob(job.id), sender=a.my_id)] == [effects.Notice]
    b = sim.nodes[1].my_id
    assert sim.call(0, "cluster.forget", b, sim.now)
    assert ("Node %s (127.0.0.1:%d) forgotten: CLUSTER FORGET; gossip about it is ignored for 60 s"
            % (b[:8].decode(), sim.ports[1])) in [t for i, t in sim.notices if i == 0]
    out = from_stranger(a, messages.Meet(()), sender=b)  # a forgotten node's MEET makes no claim
    assert b not in a.cluster.nodes and [n.key for n in out if type(n) is effects.Notice] == [
        ("ignored", STRANGER_HOST, "MEET")]
    assert snapshot(a)[0] == before[0]


def test_membership_traffic_of_a_handshake_is_answered_and_not_logged(pair):
    """A claim's PING and MEET are its handshake: answered with PONG, not
    logged as ignored (only its first MEET is, as a join attempt)."""
    sim, a, job = pair
    from_stranger(a, messages.Meet(()))
    for msg in (messages.Ping(()), messages.Meet(())):
        out = from_stranger(a, msg)
        assert [type(e) for e in out] == [effects.SendLink]


def test_claims_in_progress_are_capped():
    """Each claim is a link dialling the address its MEET gave: a flood of
    MEETs under made-up IDs makes at most MAX_CLAIMS of them; the rest are
    ignored (and logged) until claims expire."""
    sim = SimCluster(1)
    node = sim.nodes[0]
    node.set_time(sim.now)
    links = 0
    for i in range(MAX_CLAIMS + 10):
        out = from_stranger(node, messages.Meet(()), sender=b"%040x" % (i + 1))
        links += sum(1 for e in out if type(e) is effects.Link)
    assert links == MAX_CLAIMS == sum(1 for n in node.cluster.nodes.values() if n.claimed_from)
    assert [n.key for n in out if type(n) is effects.Notice] == [("ignored", STRANGER_HOST, "MEET")]
    sim.advance(16000)  # they expire: room again
    assert any(type(e) is effects.Link for e in from_stranger(node, messages.Meet(())))
