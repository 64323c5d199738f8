"""Crash states replayed (tests/support/crash_states.py: the model, the recorder,
the workloads): every state the disk may hold after a power cut at any
point of a workload, a node started on each.

Each workload is recorded once per module (its log of writes, fsyncs and
renames, and when each reply left); every state of both models is then
started in memory and checked: it starts (a damaged state may be refused
in one line, and starts after check_aof --fix), every job acknowledged as
durable is there, nothing never added is.  The figures of a run are
printed (pytest -s), and by ``python -m tests.support.crash_states``.
"""

import random

import pytest

from tests.support import crash_states as cs
from tests.support.crash_states import MODELS, WORKLOADS, Op, RecordingFileSystem

REWRITES = ("rewrite-in-traffic", "ack-delete", "appendonly-at-run-time", "no", "controlled-restart")
ALWAYS_WORKLOADS = [n for n, w in WORKLOADS.items() if w.directives.get("appendfsync") == "always"]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """Each workload's Recording, made on first use."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = cs.record(name, tmp_path_factory.mktemp("rec-" + name) / "node")
        return made[name]

    return get


@pytest.fixture(scope="module")
def reports(recordings, tmp_path_factory):
    """The Report of each workload under each model, made on first use
    (and printed: pytest -s shows the figures)."""
    made = {}

    def get(name, model):
        if (name, model) not in made:
            report = cs.replay(recordings(name), model, tmp_path_factory.mktemp("%s-%s" % (name, model)), name)
            print(report.line())
            made[name, model] = report
        return made[name, model]

    return get


@pytest.mark.parametrize("name, model", [pytest.param(n, m, id="%s-%s" % (n, m)) for n in WORKLOADS for m in MODELS])
def test_every_crash_state_starts_with_every_acknowledged_job(recordings, reports, name, model):
    """It starts (a damaged state: after check_aof --fix if refused), with
    every job acknowledged as durable, none never added; under always, no
    job whose deletion was acknowledged is back."""
    report = reports(name, model)
    assert report.states > 0 and report.started + report.refused == report.states
    failures = report.lost + report.unexpected + report.bad_refusals
    assert not failures, "%d failures, the first ones:\n%s" % (len(failures), "\n".join(failures[:10]))
    if recordings(name).directives.get("appendfsync") == "always":
        assert report.resurrected == 0


@pytest.mark.parametrize("name, model", [pytest.param(n, m, id="%s-%s" % (n, m))
                                         for n in ("controlled-restart", "controlled-restart-no-aof")
                                         for m in MODELS])
def test_a_retry_0_job_delivered_after_a_controlled_restart_is_never_queued_again(reports, name, model):
    report = reports(name, model)
    assert not report.redelivered, "\n".join(report.redelivered[:5])


def test_acknowledged_deletions_under_always_stay_deleted(recordings, reports):
    """ACKJOB, DELJOB and FASTACK answer after their DELJOB record is
    fsynced: no crash state brings such a job back (the spec makes acks
    best effort; here, on one node, they are durable)."""
    assert len(recordings("ack-delete").history.deletes_acked) == 5  # (each of them answered :1)
    for model in MODELS:
        assert reports("ack-delete", model).resurrected == 0


def test_everysec_may_bring_back_acknowledged_deletions(reports):
    """Under everysec an ACKJOB's reply leaves before its record is
    fsynced: a crash within the second brings the job back.  At least
    once, not a loss: counted, as the figure docs/reliability.md gives."""
    report = reports("everysec", "ordered")
    assert report.resurrected > 0 and not report.failures


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_kill_9_at_any_point_loses_nothing_the_node_acknowledged(recordings, tmp_path, name):
    """kill -9 of the process leaves every write it made (the kernel has
    them): whatever appendfsync says, every job whose ADDJOB was answered
    (and every schedule whose SCHEDULE ADD was) is there, no deleted one is
    back, and no RETRY 0 job delivered is queued again."""
    rec = recordings(name)
    problems = []
    for c in range(len(rec.ops) + 1):
        state = cs.killed_state(rec, c)
        directory = tmp_path / ("k%d" % c)
        cs.materialise(str(directory), state.files)
        service = cs.build_node(str(directory), rec.restart)
        jobs = service.runtime.node.jobs
        problems += ["kill after op %d: %s missing" % (c, j) for j in sorted(rec.required(c, kill=True))
                     if j not in jobs]
        problems += ["kill after op %d: deleted %s is back" % (c, j) for j in rec.deleted(c) if j in jobs]
        missing, back = rec.catalog_problems(c, service.runtime.node, kill=True)
        problems += ["kill after op %d: schedule %s missing" % (c, n) for n in missing]
        problems += ["kill after op %d: deleted schedule %s is back" % (c, n) for n in back]
        problems += ["kill after op %d: %s (RETRY 0, delivered) is queued again" % (c, j)
                     for j in rec.delivered(c) if j in jobs and jobs.get(j).retry == 0
                     and jobs.get(j).state == cs.QUEUED]
        service.stopService()
    assert not problems, "\n".join(problems[:10])


# -- the order of the operations, read from the log ----------------------------------


@pytest.mark.parametrize("name", ALWAYS_WORKLOADS)
def test_no_reply_leaves_before_its_records_are_fsynced_under_always(recordings, name):
    """At the moment each ADDJOB reply left, the file the AOF name is had
    no write after its last fsync."""
    rec = recordings(name)
    acks = [a.at for a in rec.history.adds.values() if a.policy == "always" and a.at > 0]
    assert acks
    for at in acks:
        names = cs.killed_state(rec, at).inodes
        inode = names[rec.aof]
        last_write = max([i for i, op in enumerate(rec.ops[:at]) if op.inode == inode and op.kind == "write"],
                         default=-1)
        assert any(op.kind == "fsync" and op.inode == inode for op in rec.ops[last_write + 1:at]), \
            "a reply left at op %d with the write at op %d not fsynced" % (at, last_write)


@pytest.mark.parametrize("name", REWRITES)
def test_a_rewrite_leaves_no_temp_file(recordings, name):
    """Every rewrite's temp file is renamed over the AOF (or removed) and
    the directory fsynced after the rename: no temp file in the directory
    at the end, and none in any crash state after the directory fsync."""
    rec = recordings(name)
    done = cs.rewrites(rec)
    assert done and all(renamed is not None for _, _, renamed, _ in done)
    final = cs.killed_state(rec, len(rec.ops)).files
    assert not [n for n in final if ".rewrite-" in n or ".tmp" in n]
    for inode, _, renamed, _ in done:
        synced = [i for i, op in enumerate(rec.ops) if op.kind == "fsync_dir" and i > renamed]
        assert synced, "the rename at op %d is never made durable" % renamed
        for model in MODELS:
            for state in cs.states_at(rec, synced[0] + 1, model, random.Random(0)):
                assert inode not in [i for n, i in state.inodes.items() if n != rec.aof]


@pytest.mark.parametrize("name", REWRITES)
@pytest.mark.parametrize("model", MODELS)
def test_a_crash_during_a_rewrite_leaves_the_old_file_or_the_new_one_whole(recordings, name, model):
    problems = cs.rewrite_violations(recordings(name), model)
    assert not problems, "\n".join(problems[:10])


# -- the checker finds what it is meant to find ---------------------------------------


class AcksBeforeFsync(RecordingFileSystem):
    """A node whose fsyncs do nothing: its replies leave with the records
    still in the page cache."""

    def fsync(self, fd):
        pass


def test_a_node_acknowledging_before_its_fsync_loses_jobs_in_crash_states(tmp_path):
    rec = cs.record("one-batch", tmp_path / "node", fs_class=AcksBeforeFsync)
    for model in MODELS:
        report = cs.replay(rec, model, tmp_path / model, "no fsync", limit=4)
        assert len(report.lost) > 10, report.line()


def test_a_rewrite_renaming_before_its_fsync_is_caught(recordings):
    rec = recordings("rewrite-in-traffic")
    (inode, _, renamed, _), = cs.rewrites(rec)
    fsync = max(i for i, op in enumerate(rec.ops[:renamed]) if op.kind == "fsync" and op.inode == inode)
    broken = cs.Recording.__new__(cs.Recording)
    broken.__dict__.update(rec.__dict__)
    broken.ops = rec.ops[:fsync] + rec.ops[fsync + 1:renamed + 1] + [rec.ops[fsync]] + rec.ops[renamed + 1:]
    assert cs.rewrite_violations(rec, "ordered") == []
    assert any("not whole" in p for p in cs.rewrite_violations(broken, "ordered"))


def test_the_recorder_sees_a_file_changed_behind_it(tmp_path):
    fs = RecordingFileSystem(str(tmp_path))
    fd = fs.open_append(str(tmp_path / "f"))
    fs.write(fd, b"abc")
    fs.close(fd)
    with open(tmp_path / "f", "ab") as f:
        f.write(b"d")
    assert fs.check_door() == ["f: content changed behind the FileSystem"]
    with open(tmp_path / "g", "wb"):
        pass
    assert "names:" in fs.check_door()[0]


# -- the model ------------------------------------------------------------------------


def _log(*ops, initial=None):
    """A Recording of hand-written operations (inode 1 is "a")."""
    rec = cs.Recording.__new__(cs.Recording)
    rec.ops = list(ops)
    rec.aof = "a"
    rec.initial_names = dict(initial or {})
    rec.initial_contents = {i: b"" for i in rec.initial_names.values()}
    return rec


def _contents(rec, c, model):
    return [s.files.get("a") for s in cs.states_at(rec, c, model, random.Random(0), limit=1000)]


RECORD = b"*2\r\n$6\r\nDELJOB\r\n$3\r\nabc\r\n"


def test_ordered_appends_persist_as_a_prefix_the_last_one_torn():
    rec = _log(Op("write", 1, "a", offset=0, data=b"A" * 4), Op("fsync", 1, "a"),
               Op("write", 1, "a", offset=4, data=RECORD), Op("write", 1, "a", offset=4 + len(RECORD), data=RECORD),
               initial={"a": 1})
    ordered = _contents(rec, 4, "ordered")
    assert all((b"AAAA" + RECORD * 2).startswith(c) and c.startswith(b"AAAA") for c in ordered)
    assert b"AAAA" in ordered and b"AAAA" + RECORD * 2 in ordered
    assert b"AAAA*2\r\n$" in ordered  # torn inside the RESP header
    weak = _contents(rec, 4, "weak")
    assert {b"AAAA", b"AAAA" + RECORD, b"AAAA" + RECORD * 2, b"AAAA" + RECORD + b"*2\r\n$"} <= set(weak)
    assert b"AAAA" + b"\0" * len(RECORD) + RECORD in weak  # the first write lost, the second kept: a hole
    assert _contents(rec, 2, "weak") == [b"AAAA"]  # fsynced: nothing else


def test_cuts_fall_inside_the_header_and_the_record():
    cuts = cs.cuts(RECORD * 2, random.Random(0))
    assert RECORD.index(b"$") + 1 in cuts and len(RECORD) in cuts and len(RECORD) - 1 in cuts
    assert all(0 < c < len(RECORD) * 2 for c in cuts)


def test_a_new_name_needs_a_directory_fsync_in_the_weak_model():
    rec = _log(Op("link", 1, "a"), Op("write", 1, "a", offset=0, data=b"x"), Op("fsync", 1, "a"),
               Op("fsync_dir"))
    assert None in _contents(rec, 3, "weak") and b"x" in _contents(rec, 3, "weak")
    assert _contents(rec, 3, "ordered") == [b"x"]  # the journal commit of the fsync carries the name
    assert _contents(rec, 4, "weak") == [b"x"]


def test_a_rename_is_the_old_name_or_the_new_one_until_the_directory_fsync():
    rec = _log(Op("link", 2, "t"), Op("write", 2, "t", offset=0, data=b"new"), Op("fsync", 2, "t"),
               Op("rename", 2, "t", dst="a"), Op("fsync_dir"), initial={"a": 1})
    assert set(_contents(rec, 4, "weak")) == {b"", b"new"}
    assert _contents(rec, 5, "weak") == [b"new"]
    # the rename without the link that made its source is not a state
    assert all(s.inodes.get("a") in (1, 2) for s in cs.states_at(rec, 4, "weak", random.Random(0)))


def test_the_figures_line_names_the_counts(reports):
    line = reports("one-batch", "ordered").line()
    assert "states" in line and "lost 0" in line and "refusals outside the policy 0" in line
