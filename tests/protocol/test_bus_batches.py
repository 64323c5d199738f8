"""GOTJOBS (bus version 5): the GOTJOBs of one batch to a peer that reads
them leave as one message (disque.node.effects), in their place among that
peer's messages; a peer that does not announce ``H_BATCHES`` gets one
GOTJOB per job, as before."""

import types

from disque.core import messages
from disque.core.effects import Send, Unlink
from disque.node.effects import MAX_GOTJOBS, Effects
from disque.testing import IOSimCluster

import pytest

ID = [bytes([65 + i]) * 40 for i in range(3)]


def test_a_read_of_repljobs_is_confirmed_with_one_gotjobs_per_replica(tmp_path):
    cluster = IOSimCluster(3, tmp_path)
    try:
        a = cluster.client(0)
        for port in cluster.ports[1:]:
            a.call("CLUSTER", "MEET", "127.0.0.1", port)
        cluster.advance(2.0)
        since = len(cluster.frames)
        for i in range(5):  # one read of five ADDJOBs: one write of five REPLJOBs to each replica
            a.send("ADDJOB", "q", "job%d" % i, "0", "REPLICATE", "3")
        cluster.pump()
        ids = [a.reply() for _ in range(5)]
        assert all(i.startswith(b"D-") for i in ids)
        confirmations = [(s, r, m) for s, r, m in cluster.frames[since:]
                         if isinstance(m, (messages.GotJob, messages.GotJobs))]
        assert sorted((s, r, type(m).__name__) for s, r, m in confirmations) == [(1, 0, "GotJobs"), (2, 0, "GotJobs")]
        assert all(sorted(m.job_ids) == sorted(ids) for _, _, m in confirmations)
    finally:
        cluster.stop()


def test_a_node_that_does_not_read_gotjobs_gets_one_gotjob_per_job(tmp_path):
    cluster = IOSimCluster(3, tmp_path)
    try:
        view = cluster.services[0].runtime.node.cluster
        header = view.header
        view.header = lambda: header()._replace(flags=header().flags & ~messages.H_BATCHES)
        a = cluster.client(0)
        for port in cluster.ports[1:]:
            a.call("CLUSTER", "MEET", "127.0.0.1", port)
        cluster.advance(2.0)
        since = len(cluster.frames)
        for i in range(5):
            a.send("ADDJOB", "q", "job%d" % i, "0", "REPLICATE", "3")
        cluster.pump()
        ids = [a.reply() for _ in range(5)]
        assert all(i.startswith(b"D-") for i in ids)
        kinds = [type(m).__name__ for s, r, m in cluster.frames[since:] if r == 0 and "Got" in type(m).__name__]
        assert kinds == ["GotJob"] * 10
    finally:
        cluster.stop()


class _Recorder:
    """Stands for the links and the bus hub: frames are the messages."""

    def __init__(self, batches):
        self.sent = []
        self.batches = batches

    def send(self, node_id, frame):
        self.sent.append((node_id, frame))

    def drop(self, node_id):
        self.sent.append((node_id, "unlink"))

    def frame(self, msg, node_id, cached=True):
        return msg

    def reads_batches(self, node_id):
        return node_id in self.batches

    def new_round(self):
        pass


def _effects(batches):
    recorder = _Recorder(batches)
    node = types.SimpleNamespace(outbox=[])
    runtime = types.SimpleNamespace(node=node, persistence=None, reactor=types.SimpleNamespace(seconds=lambda: 0),
                                    bus=recorder, links=recorder)
    return Effects(runtime), node.outbox, recorder.sent


def test_gotjobs_keep_their_place_among_a_peers_messages():
    effects, outbox, sent = _effects({b"x", b"y"})
    outbox += [Send(b"x", messages.GotJob(ID[0])), Send(b"y", messages.GotJob(ID[0])),
               Send(b"x", messages.GotJob(ID[1])), Send(b"x", messages.Queued(ID[2], 0)),
               Send(b"x", messages.GotJob(ID[2])), Send(b"z", messages.GotJob(ID[1])),
               Send(b"y", messages.GotJob(ID[1])), Unlink(b"y"), Send(b"x", messages.GotJob(ID[0]))]
    effects.drain()
    per_peer = {}
    for node_id, what in sent:
        per_peer.setdefault(node_id, []).append(what)
    assert per_peer == {
        b"x": [messages.GotJobs((ID[0], ID[1])), messages.Queued(ID[2], 0),  # in their place: before the QUEUED
               messages.GotJob(ID[2]),  # all kept ones leave before a link changes ...
               messages.GotJob(ID[0])],  # ... and at the drain's end
        b"y": [messages.GotJobs((ID[0], ID[1])), "unlink"],
        b"z": [messages.GotJob(ID[1])],  # z does not read GOTJOBS
    }
    assert sent.index((b"x", messages.GotJob(ID[2]))) < sent.index((b"y", "unlink"))


def test_a_long_run_of_gotjobs_is_split_at_the_wires_limit():
    effects, outbox, sent = _effects({b"x"})
    ids = [b"%040d" % i for i in range(MAX_GOTJOBS + 3)]
    outbox += [Send(b"x", messages.GotJob(i)) for i in ids]
    effects.drain()
    assert [type(m).__name__ for _, m in sent] == ["GotJobs", "GotJobs"]
    assert list(sent[0][1].job_ids) + list(sent[1][1].job_ids) == ids


@pytest.mark.parametrize("count", [1, 2])
def test_the_core_takes_gotjobs_as_one_gotjob_per_id(tmp_path, count):
    """A job replicated to ``count`` + 1 nodes is confirmed by a GOTJOBS as
    by its GOTJOBs."""
    from disque.testing.sim import SimCluster

    sim = SimCluster(3)
    sim.chain_meet()
    sim.advance(5000)
    node = sim.nodes[0]
    node.set_time(sim.now)
    jobs = [node.addjob.add(b"q", b"body", count + 1, 0, -1, 3600, 0, False) for _ in range(3)]
    handles = [object() for _ in jobs]
    for job, handle in zip(jobs, handles):
        node.addjob.await_replication(job, handle, 0, b"ok", b"fail")
    node.outbox.clear()
    header = sim.nodes[1].cluster.header()
    node.bus_receive(header, messages.GotJobs(tuple(j.id for j in jobs)), None)
    replies = [e for e in node.outbox if type(e).__name__ == "Reply"]
    if count == 1:
        assert [r.client for r in replies] == handles and all(r.payload == b"ok" for r in replies)
    else:
        assert replies == []  # one copy of two
        node.bus_receive(sim.nodes[2].cluster.header(), messages.GotJobs(tuple(j.id for j in jobs)), None)
        assert [r.client for r in node.outbox if type(r).__name__ == "Reply"] == handles
