"""The AOF provider in process: records, loading rules, progress log;
damage (record checksums, the aof-load-damaged policy) and check_aof."""

import itertools
import math
import os
import re
import zlib

import pytest
from twisted.logger import globalLogPublisher
from zope.interface.verify import verifyObject

from disque.core.job import ACTIVE, QUEUED, serialize
from disque.core.node import NodeState
from disque.interfaces import IPersistence, IPersistenceFactory
from disque.persistence import aof, load, records, scan
from disque.plugins import find_strategy, make_strategy
from disque.tools import check_aof
from tests.support.aof_files import AOF, Logged, Turns, config, load_file
from tests.support.process import Client  # (its RESP encoder writes records as files before checksums had them)


def write_jobs(tmp_path, n, state=QUEUED, retry=30):
    node = NodeState(b"a" * 40, now=1_000_000)
    jobs = [node.addjob.add(b"q", b"body-%d" % i, 1, 0, retry, 3600, 0, False) for i in range(n)]
    with open(tmp_path / "disque.aof", "wb") as f:
        for j in jobs:
            j.state = state
            f.write(records.record_bytes((b"LOADJOB", j)))
        f.write(records.record_bytes((b"DELJOB", jobs[0].id)))
    return jobs


def test_provider_interface(tmp_path):
    f = find_strategy(IPersistenceFactory, "aof")
    assert verifyObject(IPersistenceFactory, f)
    p = make_strategy(IPersistenceFactory, "aof:rewrite-step=7", config(tmp_path))
    assert verifyObject(IPersistence, p) and isinstance(p, aof.AOFPersistence) and p.rewrite_step == 7


def test_load_rules_and_progress_log(tmp_path):
    jobs = write_jobs(tmp_path, 300)
    clock = itertools.count(0, 0.6)  # every look 0.6 s later (one every CLOCK_EVERY records): progress is due
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"), clock=lambda: next(clock))
    assert verifyObject(IPersistence, p)
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        node = NodeState(b"b" * 40, now=1_000_000)
        assert p.load(node) == 301
    finally:
        globalLogPublisher.removeObserver(events.append)
        p.close()
    assert len(node.jobs) == 299 and jobs[0].id not in node.jobs  # the DELJOB applied
    assert all(j.state == ACTIVE for j in node.jobs.values())  # not queued after a crash
    assert not node.queues.get(b"q") or len(node.queues.get(b"q").jobs) == 0
    texts = [e.get("log_format", "") for e in events]
    assert any("Loading the AOF" in t for t in texts) and any("AOF loaded" in t for t in texts)


def test_aof_off_ignores_the_file_unless_it_is_a_controlled_restart(tmp_path):
    write_jobs(tmp_path, 5)
    node = NodeState(b"b" * 40, now=1_000_000)
    assert aof.AOFPersistence(config(tmp_path)).load(node) == 0 and len(node.jobs) == 0
    data = (tmp_path / "disque.aof").read_bytes()
    (tmp_path / "disque.aof").write_bytes(records.MARKER + data)
    assert aof.AOFPersistence(config(tmp_path)).load(node) == 7
    assert len(node.queues.get(b"q").jobs) == 4  # queued again: a controlled restart
    assert not (tmp_path / "disque.aof").exists() and (tmp_path / "disque.aof.loaded").exists()


# -- progress of long work ----------------------------------------------------------

def test_progress_arithmetic():
    assert load.progress(0, 1000, 0.0) == (0.0, 0.0, 1)  # no rate yet: Redis' made-up 1 s
    assert load.progress(0, 1000, 2.0) == (0.0, 0.0, 1)
    assert load.progress(250, 1000, 5.0) == (25.0, 50.0, 15)  # 750 left at 50/s
    assert load.progress(999, 1000, 9.99) == (99.9, 100.0, 1)  # under a second left: rounded up
    assert load.progress(400, 1000, 1.0) == (40.0, 400.0, 2)  # 1.5 s
    assert load.progress(1000, 1000, 4.0) == (100.0, 250.0, 0)
    assert load.progress(1200, 1000, 4.0)[0] == 100.0 and load.progress(1200, 1000, 4.0)[2] == 0  # grew meanwhile
    assert load.progress(0, 0, 0.0) == (100.0, 0.0, 0)  # nothing to do


class FakeClock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_a_load_in_steps_reports_its_progress(tmp_path):
    jobs = write_jobs(tmp_path, 1000)
    total = (tmp_path / "disque.aof").stat().st_size
    clock = FakeClock(1_795_000_000.0)
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"), sync_load_max=total - 1, clock=clock)
    node = NodeState(b"b" * 40, now=1_000_000)
    step = p.begin_load(node)
    assert step is not None and len(node.jobs) == 0  # one byte too big to load at once
    names = [k for k, _ in p.info()]
    assert names[:9] == ["loading", "aof_enabled", "aof_state", "aof_rewrite_in_progress", "aof_rewrite_scheduled",
                         "aof_last_rewrite_time_sec", "aof_current_rewrite_time_sec", "aof_last_bgrewrite_status",
                         "aof_last_write_status"]  # the original's, in its order; progress comes at the end
    assert names[-8:] == ["loading_start_time", "loading_total_bytes", "loading_loaded_bytes", "loading_loaded_perc",
                          "loading_eta_seconds", "loading_loaded_records", "loading_rate_bytes_per_sec",
                          "loading_rate_records_per_sec"]
    assert dict(p.info())["loading_eta_seconds"] == 1  # nothing known yet
    clock.t += 2.0
    assert step(0) is False  # a slice of no time: the records between two looks at the clock
    n = load.CLOCK_EVERY
    loaded = len(b"".join(records.record_bytes((b"LOADJOB", j)) for j in jobs[:n]))  # exact: whole records
    fields = dict(p.info())
    assert fields["loading"] == 1 and fields["loading_start_time"] == 1_795_000_000
    assert fields["loading_total_bytes"] == total and fields["loading_loaded_bytes"] == loaded
    assert fields["loading_loaded_records"] == n and len(node.jobs) == n
    assert fields["loading_loaded_perc"] == pytest.approx(100.0 * loaded / total)
    assert fields["loading_rate_bytes_per_sec"] == loaded // 2 and fields["loading_rate_records_per_sec"] == n // 2
    assert fields["loading_eta_seconds"] == math.ceil((total - loaded) / (loaded / 2.0))
    clock.t += 2.0
    assert step(0) is False and dict(p.info())["loading_loaded_records"] == 2 * n
    assert step(float("inf")) is True
    fields = dict(p.info())
    assert fields["loading"] == 0 and not [k for k in fields if k.startswith("loading_")]
    assert len(node.jobs) == 999 and fields["aof_state"] == "on"
    p.close()


def test_a_small_file_loads_at_once_and_a_bad_one_raises_from_begin_load(tmp_path):
    write_jobs(tmp_path, 50)
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"))
    node = NodeState(b"b" * 40, now=1_000_000)
    assert p.begin_load(node) is None and len(node.jobs) == 49 and p.loading is None
    p.close()
    data = (tmp_path / "disque.aof").read_bytes()
    cut = data.index(b"*3\r\n$7\r\nLOADJOB", 10)  # the second record
    (tmp_path / "disque.aof").write_bytes(data[:cut] + b"GARBAGE!\r\n" + data[cut:])
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"), sync_load_max=0)
    step = p.begin_load(NodeState(b"c" * 40, now=1_000_000))
    with pytest.raises(records.AOFError) as e:
        step(float("inf"))
    assert str(e.value).startswith(
        "cannot load the append only file: unknown record b'GARBAGE!' after offset %d" % cut)
    assert "check_aof" in str(e.value) and p.loading is None and dict(p.info())["loading"] == 0


def test_the_rewrite_reports_its_progress(tmp_path):
    from disque.core.job import ACKED

    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"), rewrite_step=10, clock=FakeClock(1000.0))
    p.reactor = turns = Turns()
    node = NodeState(b"a" * 40, now=1_000_000)
    p.load(node)
    jobs = [node.addjob.add(b"q", b"body-%d" % i, 1, 0, 30, 3600, 0, False) for i in range(100)]
    for j in jobs[:20]:
        j.state = ACKED  # gone through, not written
    p.rewrite(node)  # the first step runs at once
    names = [k for k, _ in p.info()]
    assert names[-5:] == ["aof_rewrite_jobs_written", "aof_rewrite_jobs_total", "aof_rewrite_progress_perc",
                          "aof_rewrite_rate_jobs_per_sec", "aof_rewrite_eta_seconds"]
    fields = dict(p.info())
    assert fields["aof_rewrite_in_progress"] == 1 and fields["aof_rewrite_jobs_total"] == 100
    assert fields["aof_rewrite_eta_seconds"] == 1  # no time has passed yet
    steps = 1
    while turns.calls:
        p.clock.t += 0.5
        before = dict(p.info())
        f, args = turns.calls.pop(0)
        f(*args)
        steps += 1
        if p.rewriting is None:
            break
        fields = dict(p.info())
        rewrite = p.rewriting
        assert 10 <= fields["aof_rewrite_jobs_written"] - before["aof_rewrite_jobs_written"]  # a step's worth
        assert fields["aof_rewrite_jobs_written"] == rewrite.written <= rewrite.visited <= 100
        assert fields["aof_rewrite_progress_perc"] == pytest.approx(rewrite.visited)  # of 100 jobs
        elapsed = 0.5 * (steps - 1)
        assert fields["aof_rewrite_rate_jobs_per_sec"] == int(rewrite.visited / elapsed)
        assert fields["aof_rewrite_eta_seconds"] == math.ceil((100 - rewrite.visited) / (rewrite.visited / elapsed))
    assert steps > 3 and p.rewriting is None and p.last_rewrite_status == "ok"
    fields = dict(p.info())
    assert fields["aof_rewrite_in_progress"] == 0 and not [k for k in fields if k.startswith("aof_rewrite_jobs")]
    p.close()
    assert (tmp_path / "disque.aof").read_bytes().count(b"LOADJOB") == 80


# -- damage: record checksums, the aof-load-damaged policy, check_aof -----------------

def record_start(data, job_id):
    """Where the LOADJOB record holding ``job_id`` starts in ``data``."""
    return data.rindex(b"*3\r\n$7\r\nLOADJOB\r\n", 0, data.index(job_id))


def flip_body_bit(tmp_path, job, bit=0x04):
    """Flip one bit of ``job``'s body in the file; returns the offset of
    its record."""
    path = tmp_path / AOF
    data = bytearray(path.read_bytes())
    at = data.index(job.id) + 40 + 4 + len(job.queue) + 4  # its body (disque.core.job.serialize)
    assert data[at:at + 5] == b"body-"
    data[at] ^= bit
    path.write_bytes(bytes(data))
    return record_start(bytes(data), job.id)


def test_records_carry_a_crc32_of_their_name_and_argument(tmp_path):
    node = NodeState(b"a" * 40, now=1_000_000)
    job = node.addjob.add(b"q", b"body", 1, 0, 30, 3600, 0, False)
    data = serialize(job)
    assert records.record_bytes((b"LOADJOB", job)) == (
        b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(data), data, zlib.crc32(b"LOADJOB" + data)))
    assert records.record_bytes((b"DELJOB", job.id)) == (
        b"*3\r\n$6\r\nDELJOB\r\n$40\r\n%b\r\n$8\r\n%08x\r\n" % (job.id, zlib.crc32(b"DELJOB" + job.id)))
    # where the job ID sits in a LOADJOB record (to name the job of a damaged one)
    assert records.record_job_id(b"LOADJOB", data) == job.id
    # the end offsets read back are exact, as the sizes of the encodings
    one = records.record_bytes((b"LOADJOB", job))
    (tmp_path / AOF).write_bytes(one + records.record_bytes((b"DELJOB", job.id)))
    assert [(k, e) for k, _, e in scan.scan_records(str(tmp_path / AOF))] == [
        (b"LOADJOB", len(one)), (b"DELJOB", len(one) + 77), (None, len(one) + 77)]
    # read_records: the commands without their checksums
    assert list(scan.read_records(str(tmp_path / AOF))) == [
        ([b"LOADJOB", data], len(one)), ([b"DELJOB", job.id], len(one) + 77), (None, len(one) + 77)]
    with pytest.raises(ValueError):
        records.record_bytes((b"OTHER", b""))


def test_a_flipped_bit_in_a_job_body_is_refused_by_default(tmp_path):
    jobs = write_jobs(tmp_path, 20)
    offset = flip_body_bit(tmp_path, jobs[7])
    before = (tmp_path / AOF).read_bytes()
    with pytest.raises(records.AOFError) as e:
        load_file(tmp_path)
    text = str(e.value)
    assert text.startswith("cannot load the append only file: checksum mismatch after offset %d (job %s)"
                           % (offset, jobs[7].id.decode()))
    assert "aof-load-damaged skip" in text and "check_aof" in text and "\n" not in text
    assert e.value.offset == offset
    assert (tmp_path / AOF).read_bytes() == before  # left as it is, for the tool


def test_a_flipped_bit_in_a_job_body_is_skipped_with_the_directive(tmp_path):
    jobs = write_jobs(tmp_path, 20)
    offset = flip_body_bit(tmp_path, jobs[7])
    size = len(records.record_bytes((b"LOADJOB", jobs[7])))
    with Logged() as logged:
        p, node = load_file(tmp_path, aof_load_damaged="skip")
    assert jobs[7].id not in node.jobs and len(node.jobs) == 18  # the damaged one, and the DELJOB's
    assert all(j.id in node.jobs for j in jobs[1:] if j is not jobs[7])
    assert node.jobs.table.get(jobs[8].id).body == b"body-8"  # the records after it are read on
    assert "Damaged AOF record at offset %d: job %s (checksum mismatch); skipped (aof-load-damaged skip)" % (
        offset, jobs[7].id.decode()) in logged.lines
    assert any("loaded without 1 damaged records (%d bytes)" % size in line for line in logged.lines)
    fields = dict(p.info())
    assert fields["aof_load_damaged_records"] == 1 and fields["aof_load_damaged_bytes"] == size
    # Rewritten at once: the damage does not stay, the next start finds none.
    report = check_aof.check(str(tmp_path / AOF))
    assert report.valid and report.records == 18
    assert jobs[7].id not in (tmp_path / AOF).read_bytes()


def test_the_damage_counters_come_after_the_originals_fields_only_after_damage(tmp_path):
    jobs = write_jobs(tmp_path, 3)
    p, _ = load_file(tmp_path)
    assert "aof_load_damaged_records" not in dict(p.info())  # INFO as the original's (tests/support/golden)
    p.close()
    flip_body_bit(tmp_path, jobs[1])
    p, _ = load_file(tmp_path, aof_load_damaged="skip")
    names = [k for k, _ in p.info()]
    assert names.index("aof_load_damaged_records") > names.index("aof_last_write_status")
    assert names[names.index("aof_load_damaged_records") + 1] == "aof_load_damaged_bytes"
    assert dict(p.info())["aof_load_damaged_records"] == 1


def test_files_without_checksums_and_mixed_files_still_load(tmp_path):
    node = NodeState(b"a" * 40, now=1_000_000)
    jobs = [node.addjob.add(b"q", b"body-%d" % i, 1, 0, 30, 3600, 0, False) for i in range(6)]
    old = b"".join(Client.encode(b"LOADJOB", serialize(j)) for j in jobs[:4]) + Client.encode(b"DELJOB", jobs[0].id)
    (tmp_path / AOF).write_bytes(old)
    _, loaded = load_file(tmp_path)
    assert [j for j in jobs if j.id in loaded.jobs] == jobs[1:4] and len(loaded.jobs) == 3
    # An old file appended to by this version: both forms, in one file.
    (tmp_path / AOF).write_bytes(old + b"".join(records.record_bytes((b"LOADJOB", j)) for j in jobs[4:])
                                 + records.record_bytes((b"DELJOB", jobs[1].id)))
    p, loaded = load_file(tmp_path)
    assert [j for j in jobs if j.id in loaded.jobs] == jobs[2:] and len(loaded.jobs) == 4
    assert "aof_load_damaged_records" not in dict(p.info())
    # An old LOADJOB that does not deserialize is damage too (its framing is intact).
    bad = Client.encode(b"LOADJOB", b"\x09" + serialize(jobs[5])[1:])  # an unknown record version
    (tmp_path / AOF).write_bytes(old + bad + records.record_bytes((b"LOADJOB", jobs[4])))
    with pytest.raises(records.AOFError, match="bad LOADJOB record .*after offset %d .*job %s"
                       % (len(old), re.escape(jobs[5].id.decode()))):
        load_file(tmp_path)
    _, loaded = load_file(tmp_path, aof_load_damaged="skip")
    assert jobs[5].id not in loaded.jobs and jobs[4].id in loaded.jobs


def test_a_checksummed_record_that_verifies_but_does_not_deserialize_is_never_skipped(tmp_path):
    node = NodeState(b"a" * 40, now=1_000_000)
    job = node.addjob.add(b"q", b"body", 1, 0, 30, 3600, 0, False)
    newer = b"\x09" + serialize(job)[1:]  # a record version this one does not know, as written
    record = b"*3\r\n$7\r\nLOADJOB\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(newer), newer, zlib.crc32(b"LOADJOB" + newer))
    (tmp_path / AOF).write_bytes(record)
    for policy in ("refuse", "skip"):
        with pytest.raises(records.AOFError, match="not understood .* checksum verifies") as e:
            load_file(tmp_path, aof_load_damaged=policy)
        assert "aof-load-damaged skip" not in str(e.value)  # skipping would not help


def test_framing_damage_in_the_middle_is_resynchronised_at_the_next_checksummed_record(tmp_path):
    jobs = write_jobs(tmp_path, 30)
    data = (tmp_path / AOF).read_bytes()
    # A bad length in job 10's record: the bytes up to job 11's record are skipped.
    start = record_start(data, jobs[10].id)
    digits = start + len(b"*3\r\n$7\r\nLOADJOB\r\n$")
    bad = data[:digits] + b"9" + data[digits + 1:]
    (tmp_path / AOF).write_bytes(bad)
    with pytest.raises(records.AOFError, match="after offset %d" % start) as e:
        load_file(tmp_path)
    assert "aof-load-damaged skip" in str(e.value)
    (tmp_path / AOF).write_bytes(bad)
    with Logged() as logged:
        p, node = load_file(tmp_path, aof_load_damaged="skip")
    assert jobs[10].id not in node.jobs and len(node.jobs) == 28
    size = record_start(data, jobs[11].id) - start
    assert dict(p.info())["aof_load_damaged_bytes"] == size
    assert any(line.startswith("Damaged AOF bytes at offset %d: %d bytes up to the next whole record" % (start, size))
               and jobs[10].id.decode() in line for line in logged.lines)
    assert check_aof.check(str(tmp_path / AOF)).valid  # rewritten


def test_a_zeroed_block_in_the_middle_loses_only_the_records_it_touches(tmp_path):
    jobs = write_jobs(tmp_path, 1000)
    data = (tmp_path / AOF).read_bytes()
    lo, hi = len(data) // 3, len(data) // 3 + 4096
    assert len(data) - hi > 64 * 1024  # (the parser gives up on a line hidden by NULs after 64 KB)
    (tmp_path / AOF).write_bytes(data[:lo] + bytes(hi - lo) + data[hi:])
    with pytest.raises(records.AOFError):
        load_file(tmp_path)
    (tmp_path / AOF).write_bytes(data[:lo] + bytes(hi - lo) + data[hi:])
    _, node = load_file(tmp_path, aof_load_damaged="skip")
    for j in jobs[1:]:
        start = record_start(data, j.id)
        end = start + len(records.record_bytes((b"LOADJOB", j)))
        assert (j.id in node.jobs) == (end <= lo or start >= hi), j.id


def test_a_zeroed_block_near_the_end_reads_as_a_torn_tail(tmp_path):
    """Unwritten blocks at the end of a file after a power cut (a file
    system that exposes them) look like this: the records of the last
    writes that were never on disk, as aof-load-truncated expects.  The
    node starts, as before record checksums, without them."""
    jobs = write_jobs(tmp_path, 100)
    data = (tmp_path / AOF).read_bytes()
    lo = record_start(data, jobs[90].id) + 50
    (tmp_path / AOF).write_bytes(data[:lo] + bytes(1024) + data[lo + 1024:])
    p, node = load_file(tmp_path)
    assert len(node.jobs) == 90 and jobs[89].id in node.jobs and jobs[90].id not in node.jobs  # (the DELJOB too)
    assert (tmp_path / AOF).read_bytes() == data[:record_start(data, jobs[90].id)]


def test_a_length_running_past_the_end_is_damage_when_whole_records_follow(tmp_path):
    """Before checksums, a length too big in the middle made the rest of
    the file look like a torn last record: aof-load-truncated dropped it
    all.  Whole checksummed records after it show it is damage."""
    jobs = write_jobs(tmp_path, 30)
    data = (tmp_path / AOF).read_bytes()
    start = record_start(data, jobs[5].id)
    digits = start + len(b"*3\r\n$7\r\nLOADJOB\r\n$")
    bad = data[:digits] + b"99999" + data[digits:]  # $157 -> $99999157
    (tmp_path / AOF).write_bytes(bad)
    with pytest.raises(records.AOFError, match="runs past the end of the file.*after offset %d" % start):
        load_file(tmp_path)
    assert (tmp_path / AOF).read_bytes() == bad  # not truncated
    _, node = load_file(tmp_path, aof_load_damaged="skip")
    assert jobs[5].id not in node.jobs and len(node.jobs) == 28


def test_a_torn_record_whose_body_holds_a_whole_record_is_still_a_torn_tail(tmp_path):
    """A job body is client data: one may hold a well-formed checksummed
    record.  Torn after it, the last record is still a torn write, not
    damage followed by a whole record (which would refuse the start, or
    load a job the client made up)."""
    jobs = write_jobs(tmp_path, 5)
    data = (tmp_path / AOF).read_bytes()
    node = NodeState(b"c" * 40, now=1_000_000)
    forged = node.addjob.add(b"q", b"made up", 1, 0, 30, 3600, 0, False)
    carrier = node.addjob.add(b"q", b"x" * 100 + records.record_bytes((b"LOADJOB", forged)) + b"y" * 100,
                              1, 0, 30, 3600, 0, False)
    torn = records.record_bytes((b"LOADJOB", carrier))
    torn = torn[:torn.index(b"yyyy")]  # cut after the record in the body
    for policy in ("refuse", "skip"):
        (tmp_path / AOF).write_bytes(data + torn)
        p, loaded = load_file(tmp_path, aof_load_damaged=policy)
        assert len(loaded.jobs) == 4 and forged.id not in loaded.jobs and carrier.id not in loaded.jobs
        assert (tmp_path / AOF).read_bytes() == data and "aof_load_damaged_records" not in dict(p.info())
    del jobs


def test_a_damaged_length_in_the_middle_costs_exactly_its_record(tmp_path):
    jobs = write_jobs(tmp_path, 30)
    data = (tmp_path / AOF).read_bytes()
    start = record_start(data, jobs[12].id)
    digits = start + len(b"*3\r\n$7\r\nLOADJOB\r\n$")
    assert data[digits:digits + 4] == b"158\r"
    bad = data[:digits] + b"118" + data[digits + 3:]  # shorter: the parse fails inside the record
    end = start + len(records.record_bytes((b"LOADJOB", jobs[12])))
    (tmp_path / AOF).write_bytes(bad)
    with Logged() as logged:
        p, node = load_file(tmp_path, aof_load_damaged="skip")
    assert jobs[12].id not in node.jobs and len(node.jobs) == 28
    assert dict(p.info())["aof_load_damaged_bytes"] == end - start
    assert any(line.startswith("Damaged AOF bytes at offset %d: %d bytes" % (start, end - start))
               and jobs[12].id.decode() in line for line in logged.lines)


def test_framing_damage_with_no_checksummed_record_after_it_is_refused_whatever_the_policy(tmp_path):
    node = NodeState(b"a" * 40, now=1_000_000)
    jobs = [node.addjob.add(b"q", b"body-%d" % i, 1, 0, 30, 3600, 0, False) for i in range(6)]
    head = b"".join(Client.encode(b"LOADJOB", serialize(j)) for j in jobs[:3])
    (tmp_path / AOF).write_bytes(head + b"GARBAGE!\r\n" + b"".join(
        Client.encode(b"LOADJOB", serialize(j)) for j in jobs[3:]))  # a file written before checksums
    for policy in ("refuse", "skip"):
        with pytest.raises(records.AOFError, match=re.escape("unknown record b'GARBAGE!' after offset %d" % len(head))) as e:
            load_file(tmp_path, aof_load_damaged=policy)
        assert ("no whole checksummed record after it" in str(e.value)) == (policy == "skip")
        assert "aof-load-damaged skip" not in str(e.value)


def test_a_torn_tail_is_still_truncated(tmp_path):
    jobs = write_jobs(tmp_path, 10)
    data = (tmp_path / AOF).read_bytes()
    extra = records.record_bytes((b"LOADJOB", jobs[1]))
    for cut in (10, len(extra) - 12, len(extra) - 1):  # in the header, in the checksum, its last byte
        (tmp_path / AOF).write_bytes(data + extra[:cut])
        with Logged() as logged:
            p, node = load_file(tmp_path, aof_load_damaged="refuse")
        assert len(node.jobs) == 9 and (tmp_path / AOF).read_bytes() == data
        assert any("truncated record" in line for line in logged.lines)
        assert "aof_load_damaged_records" not in dict(p.info())


def test_a_torn_tail_after_damage_is_truncated_too(tmp_path):
    jobs = write_jobs(tmp_path, 10)
    flip_body_bit(tmp_path, jobs[3])
    data = (tmp_path / AOF).read_bytes()
    (tmp_path / AOF).write_bytes(data + records.record_bytes((b"LOADJOB", jobs[1]))[:50])
    p, node = load_file(tmp_path, aof_load_damaged="skip")
    assert len(node.jobs) == 8 and dict(p.info())["aof_load_damaged_records"] == 1
    assert check_aof.check(str(tmp_path / AOF)).valid


def test_check_aof_reports_checksum_failures_with_the_job_and_repairs_two_ways(tmp_path, capsys):
    jobs = write_jobs(tmp_path, 20)
    path = str(tmp_path / AOF)
    assert check_aof.main([path]) == 0 and "AOF is valid: 21 records" in capsys.readouterr().out
    first = flip_body_bit(tmp_path, jobs[4])
    second = flip_body_bit(tmp_path, jobs[12])
    damaged = (tmp_path / AOF).read_bytes()
    size = len(damaged)
    assert check_aof.main([path]) == 1
    out = capsys.readouterr().out
    assert "AOF is damaged: 19 good records, 2 damaged" in out
    assert "Damaged AOF record at offset %d: job %s (checksum mismatch)" % (first, jobs[4].id.decode()) in out
    assert "Damaged AOF record at offset %d: job %s (checksum mismatch)" % (second, jobs[12].id.decode()) in out
    assert "--fix to truncate it at offset %d" % first in out and "--drop-damaged" in out
    # --drop-damaged: only the two records go; the rest stays, the file is valid.
    assert check_aof.main(["--drop-damaged", path]) == 0
    out = capsys.readouterr().out
    assert "removed 2 damaged parts" in out and (tmp_path / (AOF + ".bak")).read_bytes() == damaged
    lost = sum(len(records.record_bytes((b"LOADJOB", j))) for j in (jobs[4], jobs[12]))
    assert os.path.getsize(path) == size - lost
    report = check_aof.check(path)
    assert report.valid and report.records == 19
    _, node = load_file(tmp_path)
    assert len(node.jobs) == 17 and jobs[4].id not in node.jobs and jobs[5].id in node.jobs
    # --fix: truncated at the first damage, as the original's tool.
    (tmp_path / AOF).write_bytes(damaged)
    assert check_aof.main(["--fix", path]) == 0
    assert os.path.getsize(path) == first and check_aof.check(path).valid
    capsys.readouterr()


def test_check_aof_drops_framing_damage_and_a_torn_tail_but_not_what_it_cannot_read_past(tmp_path, capsys):
    jobs = write_jobs(tmp_path, 10)
    path = str(tmp_path / AOF)
    data = (tmp_path / AOF).read_bytes()
    cut = record_start(data, jobs[6].id)
    torn = records.record_bytes((b"LOADJOB", jobs[2]))[:30]
    (tmp_path / AOF).write_bytes(data[:cut] + b"GARBAGE!\r\n" + data[cut:] + torn)
    assert check_aof.main([path]) == 1
    out = capsys.readouterr().out
    assert "Damaged AOF bytes at offset %d: 10 bytes up to the next whole record (unknown record b'GARBAGE!')" % cut in out
    assert "truncated record at the end" in out
    assert check_aof.main(["--drop-damaged", path]) == 0
    assert (tmp_path / AOF).read_bytes() == data
    capsys.readouterr()
    # A file written before checksums: nowhere to resume after the damage.
    old = b"".join(Client.encode(b"LOADJOB", serialize(j)) for j in jobs)
    (tmp_path / AOF).write_bytes(old[:100] + b"\x00garbage\r\n" + old[100:])
    assert check_aof.main(["--drop-damaged", path]) == 1
    assert "cannot drop only the damaged records" in capsys.readouterr().out
    assert check_aof.main(["--fix", path]) == 0 and os.path.getsize(path) == 0  # (the first record was hit)
    capsys.readouterr()


@pytest.mark.parametrize("policy", ["refuse", "skip"])
def test_a_non_ascii_byte_where_framing_belongs_is_damage_not_a_crash(tmp_path, policy):
    """Found by the fault suite's corrupt nemesis: a flip made a '$' 0xa4,
    and the loader's message about it raised UnicodeDecodeError (the node
    exited instead of refusing or skipping)."""
    jobs = write_jobs(tmp_path, 10)
    data = bytearray((tmp_path / AOF).read_bytes())
    # The length header of job 4's record (not the last "$" before its ID:
    # the record's binary fields, its jittered requeue time, may hold one).
    at = record_start(data, jobs[4].id) + len(b"*3\r\n$7\r\nLOADJOB\r\n")
    assert data[at:at + 1] == b"$"
    data[at] = 0xa4
    (tmp_path / AOF).write_bytes(bytes(data))
    if policy == "refuse":
        with pytest.raises(records.AOFError) as e:
            load_file(tmp_path)
        assert "\\xa4" in str(e.value) and "\n" not in str(e.value)
    else:
        p, node = load_file(tmp_path, aof_load_damaged="skip")
        assert jobs[4].id not in node.jobs and jobs[5].id in node.jobs
