"""REPLJOBS and GOTJOBS (bus version 5): the REPLJOBs and GOTJOBs of one
turn to a peer that reads them leave as one message per run
(disque.node.effects), in their place among that peer's messages; a peer
that does not announce ``H_BATCHES`` gets one message per job, as before."""

import types

import pytest

from disque.bus import wire
from disque.core import messages
from disque.core.effects import Send, Unlink
from disque.node.effects import MAX_BATCH, MAX_BATCH_BYTES, Effects
from disque.testing import IOSimCluster

ID = [bytes([65 + i]) * 40 for i in range(3)]


def _trio(tmp_path, old=()):
    """Three nodes in memory, met; nodes ``old`` announce no H_BATCHES."""
    cluster = IOSimCluster(3, tmp_path)
    for i in old:
        view = cluster.services[i].runtime.node.cluster
        view.header = (lambda header: lambda: header()._replace(flags=header().flags & ~messages.H_BATCHES))(
            view.header)
    a = cluster.client(0)
    for port in cluster.ports[1:]:
        a.call("CLUSTER", "MEET", "127.0.0.1", port)
    cluster.advance(2.0)
    return cluster, a


def _five_adds(cluster, a):
    """One read of five ADDJOB REPLICATE 3 on node 0; their IDs and the
    bus messages it caused."""
    since = len(cluster.frames)
    for i in range(5):
        a.send("ADDJOB", "q", "job%d" % i, "0", "REPLICATE", "3")
    cluster.pump()
    ids = [a.reply() for _ in range(5)]
    assert all(i.startswith(b"D-") for i in ids)
    return ids, [(s, r, m) for s, r, m in cluster.frames[since:] if "Job" in type(m).__name__]


def test_a_read_of_addjobs_replicates_with_one_repljobs_and_one_gotjobs_per_replica(tmp_path):
    cluster, a = _trio(tmp_path)
    try:
        ids, sent = _five_adds(cluster, a)
        assert sorted((s, r, type(m).__name__) for s, r, m in sent) == [
            (0, 1, "ReplJobs"), (0, 2, "ReplJobs"), (1, 0, "GotJobs"), (2, 0, "GotJobs")]
        for s, r, m in sent:
            assert [rec.id for rec in m.jobs] == ids if s == 0 else list(m.job_ids) == ids
    finally:
        cluster.stop()


@pytest.mark.parametrize("old", [(0,), (1,)])
def test_a_node_that_does_not_read_batches_gets_one_message_per_job(tmp_path, old):
    """Node 0 of the previous version gets GOTJOBs; node 1 gets REPLJOBs
    (node 2 still gets a REPLJOBS)."""
    cluster, a = _trio(tmp_path, old)
    try:
        ids, sent = _five_adds(cluster, a)
        kinds = sorted((s, r, type(m).__name__) for s, r, m in sent)
        if old == (0,):
            assert kinds == [(0, 1, "ReplJobs"), (0, 2, "ReplJobs")] + [(1, 0, "GotJob")] * 5 + [(2, 0, "GotJob")] * 5
        else:
            assert kinds == [(0, 1, "ReplJob")] * 5 + [(0, 2, "ReplJobs"), (1, 0, "GotJobs"), (2, 0, "GotJobs")]
    finally:
        cluster.stop()


class _Recorder:
    """Stands for the links and the bus hub: a frame is the message."""

    def __init__(self, batches):
        self.sent = []
        self.batches = batches

    def send(self, node_id, frame):
        self.sent.append((node_id, frame))

    def drop(self, node_id):
        self.sent.append((node_id, "unlink"))

    def frame(self, msg, node_id, cached=True):
        return msg

    def repljobs_frame(self, msgs, records):
        for m in msgs:
            records.setdefault(id(m), (m, m.job))
        return messages.ReplJobs(tuple(m.job for m in msgs))

    def reads_batches(self, node_id):
        return node_id in self.batches

    def new_round(self):
        pass


class _NoPersistence:
    def flush(self):
        return True


def _effects(batches):
    recorder = _Recorder(batches)
    node = types.SimpleNamespace(outbox=[])
    runtime = types.SimpleNamespace(node=node, persistence=_NoPersistence(), counting_clients=False,
                                    reactor=types.SimpleNamespace(seconds=lambda: 0), bus=recorder, links=recorder)
    return Effects(runtime), node.outbox, recorder.sent


def _record(job_id, body=b"b"):
    return messages.JobRecord(job_id, b"q", body, 3, 0, 0, 0, 0, 0, 0, (), b"", None)


def test_kept_messages_leave_in_their_place_among_a_peers_messages():
    effects, outbox, sent = _effects({b"x", b"y"})
    repl = messages.ReplJob(_record(ID[2]))
    outbox += [Send(b"x", messages.GotJob(ID[0])), Send(b"y", messages.GotJob(ID[0])),
               Send(b"x", messages.GotJob(ID[1])), Send(b"x", repl), Send(b"y", repl),
               Send(b"x", messages.Queued(ID[2], 0)),
               Send(b"x", messages.GotJob(ID[2])), Send(b"z", messages.GotJob(ID[1])),
               Send(b"y", messages.GotJob(ID[1])), Unlink(b"y"), Send(b"x", messages.GotJob(ID[0]))]
    effects.drain()
    effects.end_turn()
    per_peer = {}
    for node_id, what in sent:
        per_peer.setdefault(node_id, []).append(what)
    assert per_peer == {
        b"x": [messages.GotJobs((ID[0], ID[1])), repl,  # a run of one: itself
               messages.Queued(ID[2], 0),  # in its place: after what was kept before it
               messages.GotJob(ID[2]),  # all that is kept leaves before a link changes ...
               messages.GotJob(ID[0])],  # ... and at the turn's end
        b"y": [messages.GotJob(ID[0]), repl, messages.GotJob(ID[1]), "unlink"],
        b"z": [messages.GotJob(ID[1])],  # z does not read batches
    }
    assert sent.index((b"x", messages.GotJob(ID[2]))) < sent.index((b"y", "unlink"))


def test_repljobs_wait_for_the_turns_end_and_each_record_is_encoded_once():
    effects, outbox, sent = _effects({b"x", b"y"})
    repls = [messages.ReplJob(_record(i)) for i in ID]
    records_seen = {}
    effects.bus.repljobs_frame = lambda msgs, records: (
        [records.setdefault(id(m), (m, m.job)) for m in msgs], records_seen.update(records),
        messages.ReplJobs(tuple(records[id(m)][1] for m in msgs)))[-1]
    for repl in repls:  # one drain per client read
        outbox += [Send(b"x", repl), Send(b"y", repl)]
        effects.drain()
    assert sent == []  # kept until the turn ends
    effects.end_turn()
    assert sent == [(b"x", messages.ReplJobs(tuple(r.job for r in repls))),
                    (b"y", messages.ReplJobs(tuple(r.job for r in repls)))]
    assert len(records_seen) == 3  # three records, not six


def test_a_long_run_is_split_by_count_and_by_bytes():
    effects, outbox, sent = _effects({b"x"})
    ids = [b"%040d" % i for i in range(MAX_BATCH + 3)]
    outbox += [Send(b"x", messages.GotJob(i)) for i in ids]
    effects.drain()
    effects.end_turn()
    assert [type(m).__name__ for _, m in sent] == ["GotJobs", "GotJobs"]
    assert list(sent[0][1].job_ids) + list(sent[1][1].job_ids) == ids
    sent.clear()
    big = [messages.ReplJob(_record(i, b"x" * (MAX_BATCH_BYTES // 2))) for i in ID]
    outbox += [Send(b"x", m) for m in big]
    effects.drain()
    effects.end_turn()
    assert sent == [(b"x", messages.ReplJobs((big[0].job, big[1].job))), (b"x", big[2])]  # a run of one: itself


def test_the_wires_repljobs_frame_is_encode_of_the_message():
    header = messages.Header(b"a" * 40, b"127.0.0.1", 7711, messages.H_BATCHES)
    records = (_record(ID[0]), _record(ID[1], b"x" * 300))
    frame = wire.encode_repljobs(header, [wire.job_record(r, wire.BATCHES) for r in records])
    assert frame == wire.encode(header, messages.ReplJobs(records), wire.BATCHES)
    assert wire.decode(frame) == (header, messages.ReplJobs(records))


@pytest.mark.parametrize("count", [1, 2])
def test_the_core_takes_a_batch_as_one_message_per_job(count):
    """A job replicated to ``count`` + 1 nodes is confirmed by GOTJOBS as
    by GOTJOBs; REPLJOBS gives a replica its copies as REPLJOBs would."""
    from disque.testing.sim import SimCluster

    sim = SimCluster(3)
    sim.chain_meet()
    sim.advance(5000)
    node, replica = sim.nodes[0], sim.nodes[1]
    node.set_time(sim.now)
    jobs = [node.addjob.add(b"q", b"body", count + 1, 0, -1, 3600, 0, False) for _ in range(3)]
    handles = [object() for _ in jobs]
    for job, handle in zip(jobs, handles):
        node.addjob.await_replication(job, handle, 0, b"ok", b"fail")
    node.outbox.clear()
    replica.set_time(sim.now)
    replica.bus_receive(node.cluster.header(), messages.ReplJobs(tuple(node.jobs.record(j) for j in jobs)), None)
    assert [replica.jobs.get(j.id) is not None for j in jobs] == [True] * 3
    got = [e.message for e in replica.outbox if type(e).__name__ == "Send"]
    assert got == [messages.GotJob(j.id) for j in jobs]
    node.bus_receive(replica.cluster.header(), messages.GotJobs(tuple(j.id for j in jobs)), None)
    replies = [e for e in node.outbox if type(e).__name__ == "Reply"]
    if count == 1:
        assert [r.client for r in replies] == handles and all(r.payload == b"ok" for r in replies)
    else:
        assert replies == []  # one copy of two
        node.bus_receive(sim.nodes[2].cluster.header(), messages.GotJobs(tuple(j.id for j in jobs)), None)
        assert [r.client for r in node.outbox if type(r).__name__ == "Reply"] == handles
