"""The catalog in the AOF (CATALOG records): written by the node's
changes and by every rewrite, loaded back in file order, and damage in
them handled as damage in a LOADJOB is (docs/persistence.md)."""

import zlib

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from disque.core.catalog import Entry, encode_entry
from disque.core.effects import Persist
from disque.core.job import serialize
from disque.core.node import NodeState
from disque.persistence import aof, records, scan
from disque.tools import check_aof
from tests.support.aof_files import AOF, Logged, Turns, config, load_file

ORIGIN = b"a" * 40
LIMIT = Entry(b"limit", b"q", 1_000_000, ORIGIN, b"rate=50")
SCHEDULE = Entry(b"schedule", b"nightly", 1_000_001, ORIGIN, b"0 3 * * *")


def catalog_of(node):
    return dict(node.settings.catalog.entries)


def make_jobs(n):
    node = NodeState(ORIGIN, now=1_000_000)
    return [node.addjob.add(b"q", b"body-%d" % i, 1, 0, 30, 3600, 0, False) for i in range(n)]


def persist_outbox(node, p):
    """Hand the node's Persist effects to ``p``, as the runtime does; the
    others are dropped."""
    for effect in node.outbox:
        if isinstance(effect, Persist):
            p.append(effect.record)
    node.outbox.clear()


def writing_node(tmp_path):
    """(an AOF on in ``tmp_path``, a node persisting into it)."""
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"))
    node = NodeState(ORIGIN, now=1_000_000)
    p.load(node)
    node.persist = True
    return p, node


# -- the record -------------------------------------------------------------------------------

def test_the_record_is_the_entry_and_a_crc32_of_its_name_and_argument(tmp_path):
    data = encode_entry(LIMIT)
    one = records.record_bytes((b"CATALOG", LIMIT))
    assert one == b"*3\r\n$7\r\nCATALOG\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (
        len(data), data, zlib.crc32(b"CATALOG" + data))
    job = make_jobs(1)[0]
    job_record = records.record_bytes((b"LOADJOB", job))
    (tmp_path / AOF).write_bytes(one + job_record + one)
    # the ends read back are exact, as the sizes of the encodings
    read = list(scan.scan_records(str(tmp_path / AOF)))
    assert read[1][1].id == job.id and read[1][1] is not job
    assert [(k, v if k != b"LOADJOB" else job, end) for k, v, end in read] == [
        (b"CATALOG", LIMIT, len(one)), (b"LOADJOB", job, len(one) + len(job_record)),
        (b"CATALOG", LIMIT, 2 * len(one) + len(job_record)), (None, None, 2 * len(one) + len(job_record))]
    assert [argv for argv, _ in scan.read_records(str(tmp_path / AOF))] == [
        [b"CATALOG", data], [b"LOADJOB", serialize(job)], [b"CATALOG", data], None]
    # a checksum verifies whatever the case of the name (as the original's command lookup)
    (tmp_path / AOF).write_bytes(one.replace(b"CATALOG", b"catalog"))
    assert [k for k, _, _ in scan.scan_records(str(tmp_path / AOF))] == [b"CATALOG", None]


def test_a_lowercased_deljob_still_deletes(tmp_path):
    """The kind a record whose name's case changed is read as is its kind's
    constant: the load compares kinds by identity (it once read such a
    DELJOB as the marker, and the job came back)."""
    jobs = make_jobs(2)
    (tmp_path / AOF).write_bytes(b"".join(records.record_bytes((b"LOADJOB", j)) for j in jobs)
                                 + records.record_bytes((b"DELJOB", jobs[0].id)).replace(b"DELJOB", b"deljob"))
    _, node = load_file(tmp_path)
    assert jobs[0].id not in node.jobs and jobs[1].id in node.jobs


# -- written, loaded, rewritten ---------------------------------------------------------------

def test_changes_are_appended_and_come_back_tombstones_included(tmp_path):
    p, node = writing_node(tmp_path)
    node.settings.change(b"limit", b"q", b"rate=50")
    node.settings.change(b"schedule", b"nightly", b"0 3 * * *")
    node.now += 1
    node.settings.change(b"limit", b"q", b"rate=70")  # later in the file: wins at load, as it did here
    node.settings.change(b"schedule", b"nightly", b"")  # a tombstone
    persist_outbox(node, p)
    p.flush()
    p.close()
    assert [k for k, _, _ in scan.scan_records(str(tmp_path / AOF))] == [b"CATALOG"] * 4 + [None]
    _, loaded = load_file(tmp_path)
    assert catalog_of(loaded) == catalog_of(node)
    assert loaded.settings.get(b"limit", b"q").value == b"rate=70"
    assert loaded.settings.get(b"schedule", b"nightly") is None
    assert loaded.settings.catalog.entries[(b"schedule", b"nightly")].deleted
    assert check_aof.check(str(tmp_path / AOF)).catalog == 4


def test_loaded_entries_reach_the_hooks_and_are_neither_written_again_nor_sent(tmp_path):
    (tmp_path / AOF).write_bytes(records.record_bytes((b"CATALOG", LIMIT)))
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"))
    node = NodeState(b"b" * 40, now=1_000_000)
    node.persist = True
    seen = []
    node.settings.on(b"limit", seen.append)
    p.load(node)
    p.close()
    assert seen == [LIMIT] and node.outbox == []
    assert (tmp_path / AOF).read_bytes() == records.record_bytes((b"CATALOG", LIMIT))


keys = st.tuples(st.sampled_from([b"limit", b"schedule", b"fired"]), st.sampled_from([b"q", b"r", b"nightly"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(keys, st.binary(max_size=12), st.integers(0, 3)), max_size=12))
def test_any_sequence_of_changes_comes_back_the_same_from_the_file_and_from_its_rewrite(tmp_path, changes):
    (tmp_path / AOF).unlink(missing_ok=True)
    p, node = writing_node(tmp_path)
    for (kind, name), value, later in changes:
        node.now += later
        node.settings.change(kind, name, value)
    persist_outbox(node, p)
    p.flush()
    _, loaded = load_file(tmp_path)
    assert catalog_of(loaded) == catalog_of(node)
    p.rewrite_now(node, False)
    p.close()
    assert check_aof.check(str(tmp_path / AOF)).catalog == len(catalog_of(node))  # one record per key
    _, loaded = load_file(tmp_path)
    assert catalog_of(loaded) == catalog_of(node)


def test_a_node_without_catalog_entries_writes_the_file_it_wrote_before_the_catalog(tmp_path):
    """A file without CATALOG records loads on the previous version: a node
    that never used schedules or limits writes nothing new, appending or
    rewriting (a controlled restart's file included)."""
    p, node = writing_node(tmp_path)
    job = node.addjob.add(b"q", b"body", 1, 0, 30, 3600, 0, False)
    persist_outbox(node, p)
    p.flush()
    jobs_only = records.record_bytes((b"LOADJOB", job))
    assert (tmp_path / AOF).read_bytes() == jobs_only
    p.rewrite_now(node, False)
    assert (tmp_path / AOF).read_bytes() == jobs_only
    p.rewrite_now(node, True)
    assert (tmp_path / AOF).read_bytes() == records.MARKER + jobs_only
    p.close()


def test_every_rewrite_writes_the_catalog_first_and_keeps_changes_made_while_it_runs(tmp_path):
    p, node = writing_node(tmp_path)
    p.rewrite_step = 10
    p.reactor = turns = Turns()
    jobs = [node.addjob.add(b"q", b"body-%d" % i, 1, 0, 30, 3600, 0, False) for i in range(50)]
    node.settings.change(b"limit", b"q", b"rate=50")
    node.settings.change(b"limit", b"gone", b"rate=1")
    node.settings.change(b"schedule", b"nightly", b"0 3 * * *")
    persist_outbox(node, p)
    p.flush()
    p.rewrite(node)  # its first step runs at once
    assert p.rewriting is not None
    node.now += 1
    node.settings.change(b"limit", b"q", b"rate=70")  # one written at the start, changed meanwhile
    node.settings.change(b"limit", b"gone", b"")  # deleted meanwhile
    node.settings.change(b"limit", b"new", b"rate=5")  # made meanwhile
    persist_outbox(node, p)
    p.flush()
    while p.rewriting is not None:
        f, args = turns.calls.pop(0)
        f(*args)
    assert p.last_rewrite_status == "ok"
    kinds = [k for k, _, _ in scan.scan_records(str(tmp_path / AOF))]
    assert kinds[:3] == [b"CATALOG"] * 3 and kinds[3:53] == [b"LOADJOB"] * 50 and kinds[53:] == [b"CATALOG"] * 3 + [None]
    node.settings.change(b"schedule", b"nightly", b"*/5 * * * *")  # after it: appended to the new file
    persist_outbox(node, p)
    p.close()
    _, loaded = load_file(tmp_path)
    assert catalog_of(loaded) == catalog_of(node) and len(catalog_of(loaded)) == 4
    assert loaded.settings.get(b"limit", b"q").value == b"rate=70" and loaded.settings.get(b"limit", b"gone") is None
    assert len(loaded.jobs) == len(jobs)


def test_a_controlled_restart_keeps_the_catalog_with_appendonly_no(tmp_path):
    p, node = writing_node(tmp_path)
    node.settings.change(b"limit", b"q", b"rate=50")
    node.settings.change(b"schedule", b"old", b"")
    persist_outbox(node, p)
    p.rewrite_now(node, True)  # SHUTDOWN REWRITE-AOF
    p.close()
    assert (tmp_path / AOF).read_bytes().startswith(records.MARKER + b"*3\r\n$7\r\nCATALOG")
    restarted = NodeState(b"b" * 40, now=1_000_000)
    aof.AOFPersistence(config(tmp_path)).load(restarted)  # appendonly no: loaded once, renamed
    assert catalog_of(restarted) == catalog_of(node)


# -- damage: as in a LOADJOB ------------------------------------------------------------------

def flip_in_argument(record):
    """A byte of the record's argument changed (the body of a job, the
    value of an entry)."""
    at = record.index(b"\r\n", record.index(b"\r\n$", 12) + 3) + 2 + len(record) // 3
    return record[:at] + bytes([record[at] ^ 0x10]) + record[at + 1:]


def flip_in_checksum(record):
    at = len(record) - 4
    return record[:at] + (b"0" if record[at:at + 1] != b"0" else b"1") + record[at + 1:]


def cut_argument(record):
    """Bytes of the argument lost, its length as it was: the record runs
    into the next one."""
    at = record.index(b"\r\n$8\r\n")
    return record[:at - 20] + record[at:]


def length_changed(by):
    """The argument's length times ``by``, plus 20."""
    def damage(record):
        at = record.index(b"\r\n$", 12) + 3
        end = record.index(b"\r\n", at)
        return record[:at] + b"%d" % (int(record[at:end]) * by + 20) + record[end:]
    return damage


def newer_version(record):
    """The argument's version byte one this version does not know, the
    checksum made again: the record is as a newer version wrote it."""
    name, arg = record.split(b"\r\n")[2], record.split(b"\r\n")[4]
    arg = b"\x09" + arg[1:]
    return b"*3\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n$8\r\n%08x\r\n" % (len(name), name, len(arg), arg, zlib.crc32(name + arg))


DAMAGE = {"flipped byte in the argument": flip_in_argument, "flipped checksum digit": flip_in_checksum,
          "argument cut short": cut_argument, "damaged length": length_changed(1),
          "length past the end of the file": length_changed(1000),
          "good checksum, undecodable argument": newer_version}


def damaged_file(tmp_path, kind, damage):
    """Jobs, a damaged record of ``kind`` (a LOADJOB or a CATALOG record),
    jobs, and a CATALOG record: returns (its offset, its damaged size, the
    jobs)."""
    jobs = make_jobs(7)
    middle = records.record_bytes((b"LOADJOB", jobs[6]) if kind == b"LOADJOB" else (b"CATALOG", LIMIT))
    head = b"".join(records.record_bytes((b"LOADJOB", j)) for j in jobs[:3])
    bad = damage(middle)
    (tmp_path / AOF).write_bytes(head + bad + b"".join(records.record_bytes((b"LOADJOB", j)) for j in jobs[3:6])
                                 + records.record_bytes((b"CATALOG", SCHEDULE)))
    return len(head), len(bad), jobs


def outcome(tmp_path, kind, damage, policy):
    """What a load with ``policy`` makes of the damaged record of ``kind``,
    told without what differs between the kinds (the job or entry named)."""
    offset, size, jobs = damaged_file(tmp_path, kind, damage)
    try:
        p, node = load_file(tmp_path, aof_load_damaged=policy)
    except records.AOFError as e:
        text = str(e)
        return ("refused", e.offset == offset, text[:text.index(" after offset")],
                "aof-load-damaged skip" in text)
    fields = dict(p.info())
    neighbours = all(j.id in node.jobs for j in jobs[:6]) and node.settings.get(b"schedule", b"nightly") is not None
    return ("loaded", neighbours, fields.get("aof_load_damaged_records"), fields.get("aof_load_damaged_bytes") == size,
            check_aof.check(str(tmp_path / AOF)).valid)


@pytest.mark.parametrize("policy", ["refuse", "skip"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_in_a_catalog_record_is_handled_as_in_a_loadjob(tmp_path, damage, policy):
    expected = {  # (what each policy does with each kind of damage: docs/persistence.md)
        ("flipped byte in the argument", "refuse"): ("refused", True, "cannot load the append only file: checksum mismatch", True),
        ("flipped checksum digit", "refuse"): ("refused", True, "cannot load the append only file: checksum mismatch", True),
        ("argument cut short", "refuse"): ("refused", True, "cannot load the append only file: bad file format", True),
        ("damaged length", "refuse"): ("refused", True, "cannot load the append only file: bad file format", True),
        ("length past the end of the file", "refuse"): (
            "refused", True, "cannot load the append only file: a record whose length runs past the end of the file",
            True),
        ("good checksum, undecodable argument", "refuse"): None,
        ("good checksum, undecodable argument", "skip"): None,
    }.get((damage, policy), ("loaded", True, 1, True, True))  # skipped: the rest loaded, the file rewritten
    theirs = outcome(tmp_path, b"LOADJOB", DAMAGE[damage], policy)
    ours = outcome(tmp_path, b"CATALOG", DAMAGE[damage], policy)
    if expected is None:  # refused whatever the policy, the message saying what is not understood
        assert theirs[:2] == ("refused", True) and not theirs[3]
        assert ours == ("refused", True, "cannot load the append only file: CATALOG record not understood "
                        "(unknown catalog entry version 9)", False)
    else:
        assert theirs == ours == expected


def test_a_skipped_catalog_record_is_named_in_the_log_and_gone_after_the_rewrite(tmp_path):
    offset, size, jobs = damaged_file(tmp_path, b"CATALOG", flip_in_argument)
    with pytest.raises(records.AOFError) as e:
        load_file(tmp_path)
    assert str(e.value).startswith("cannot load the append only file: checksum mismatch after offset %d "
                                   "(catalog entry limit q);" % offset)
    with Logged() as logged:
        _, node = load_file(tmp_path, aof_load_damaged="skip")
    assert ("Damaged AOF record at offset %d: catalog entry limit q (checksum mismatch); skipped "
            "(aof-load-damaged skip)" % offset) in logged.lines
    assert node.settings.get(b"limit", b"q") is None and catalog_of(node) == {SCHEDULE.key: SCHEDULE}
    assert len(node.jobs) == 6
    report = check_aof.check(str(tmp_path / AOF))
    assert report.valid and report.catalog == 1 and report.records == 7


def test_reading_resumes_at_a_catalog_record_after_framing_damage(tmp_path):
    jobs = make_jobs(3)
    head = records.record_bytes((b"LOADJOB", jobs[0]))
    tail = records.record_bytes((b"CATALOG", LIMIT)) + records.record_bytes((b"LOADJOB", jobs[1]))
    (tmp_path / AOF).write_bytes(head + b"GARBAGE!\r\n" + tail)
    damage = [v for k, v, _ in scan.scan_records(str(tmp_path / AOF), skip_damaged=True) if k == "damage"]
    assert [(d.offset, d.end, d.framing) for d in damage] == [(len(head), len(head) + 10, True)]
    _, node = load_file(tmp_path, aof_load_damaged="skip")
    assert catalog_of(node) == {LIMIT.key: LIMIT} and jobs[1].id in node.jobs
    # The records in the damaged bytes are counted, CATALOG ones too (they name no job).
    cut = records.record_bytes((b"CATALOG", SCHEDULE))[:-30]
    (tmp_path / AOF).write_bytes(head + b"GARBAGE!\r\n" + cut + cut + tail)
    damage = [v for k, v, _ in scan.scan_records(str(tmp_path / AOF), skip_damaged=True) if k == "damage"]
    assert [(d.end, d.records, d.job_ids) for d in damage] == [(len(head) + 10 + 2 * len(cut), 2, ())]


def test_a_torn_catalog_record_at_the_end_is_a_torn_tail(tmp_path):
    jobs = make_jobs(2)
    data = b"".join(records.record_bytes((b"LOADJOB", j)) for j in jobs)
    extra = records.record_bytes((b"CATALOG", LIMIT))
    for cut in (10, len(extra) - 12, len(extra) - 1):
        (tmp_path / AOF).write_bytes(data + extra[:cut])
        p, node = load_file(tmp_path)
        assert len(node.jobs) == 2 and catalog_of(node) == {} and (tmp_path / AOF).read_bytes() == data


_RECORDS = records.record_bytes((b"LOADJOB", make_jobs(1)[0])) + records.record_bytes((b"CATALOG", LIMIT))
_AFTER = records.record_bytes((b"CATALOG", SCHEDULE)) + records.record_bytes((b"DELJOB", b"D-" + b"0" * 38))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(len(_RECORDS) - len(records.record_bytes((b"CATALOG", LIMIT))), len(_RECORDS) - 1),
       st.integers(1, 255))
def test_a_changed_byte_in_a_catalog_record_never_reads_as_another_entry(tmp_path, at, xor):
    """Whatever byte of the record changes, reading the file (what a load
    applies, with either policy) gives the entry as it was or (damage, or
    the start of a torn tail) not at all."""
    data = bytearray(_RECORDS + _AFTER)
    data[at] ^= xor
    (tmp_path / AOF).write_bytes(bytes(data))
    for skip in (False, True):
        read = []
        try:
            read.extend(v for k, v, _ in scan.scan_records(str(tmp_path / AOF), skip_damaged=skip) if k == b"CATALOG")
        except records.AOFError:
            assert not skip  # (checksummed records follow: skip always finds where to read on)
        assert set(read) <= {LIMIT, SCHEDULE}


def test_check_aof_counts_catalog_records_and_repairs_around_them(tmp_path, capsys):
    offset, size, jobs = damaged_file(tmp_path, b"CATALOG", flip_in_checksum)
    path = str(tmp_path / AOF)
    assert check_aof.main([path]) == 1
    out = capsys.readouterr().out
    assert "AOF is damaged: 7 good records (1 catalog entry), 1 damaged" in out
    assert "Damaged AOF record at offset %d: catalog entry limit q (checksum mismatch)" % offset in out
    assert check_aof.main(["--drop-damaged", path]) == 0
    capsys.readouterr()
    assert check_aof.main([path]) == 0
    assert "AOF is valid: 7 records (1 catalog entry), " in capsys.readouterr().out
    with open(path, "ab") as f:
        f.write(records.record_bytes((b"CATALOG", LIMIT)))
    assert check_aof.main([path]) == 0
    assert "AOF is valid: 8 records (2 catalog entries), " in capsys.readouterr().out
