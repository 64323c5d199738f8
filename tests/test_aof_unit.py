"""The AOF provider in process: records, loading rules, progress log."""

import itertools
import math

import pytest
from twisted.logger import globalLogPublisher
from zope.interface.verify import verifyObject

from disque.config import Config
from disque.core.job import ACTIVE, QUEUED
from disque.core.node import NodeState
from disque.interfaces import IPersistence, IPersistenceFactory
from disque.persistence import aof, load, records
from disque.plugins import find_strategy, make_strategy


def config(tmp_path, **kw):
    c = Config.defaults()
    c.apply_overrides({"dir": str(tmp_path), **{k.replace("_", "-"): v for k, v in kw.items()}})
    return c


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


class Turns:
    """A reactor whose callLater(0) calls wait for the test to run them."""

    def __init__(self):
        self.calls = []

    def callLater(self, delay, f, *args):
        self.calls.append((f, args))


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
    cut = data.index(b"*2\r\n$7\r\nLOADJOB", 10)  # the second record
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
