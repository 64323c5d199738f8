"""The AOF provider in process: records, loading rules, progress log."""

import itertools

from twisted.logger import globalLogPublisher
from zope.interface.verify import verifyObject

from disque.config import Config
from disque.core.job import ACTIVE, QUEUED
from disque.core.node import NodeState
from disque.interfaces import IPersistence, IPersistenceFactory
from disque.persistence import aof
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
            f.write(aof.record_bytes((b"LOADJOB", j)))
        f.write(aof.record_bytes((b"DELJOB", jobs[0].id)))
    return jobs


def test_provider_interface(tmp_path):
    f = find_strategy(IPersistenceFactory, "aof")
    assert verifyObject(IPersistenceFactory, f)
    p = make_strategy(IPersistenceFactory, "aof:rewrite-step=7", config(tmp_path))
    assert verifyObject(IPersistence, p) and isinstance(p, aof.AOFPersistence) and p.rewrite_step == 7


def test_load_rules_and_progress_log(tmp_path, monkeypatch):
    jobs = write_jobs(tmp_path, 20)
    p = aof.AOFPersistence(config(tmp_path, appendonly="yes"))
    assert verifyObject(IPersistence, p)
    clock = itertools.count(0, 0.3)  # every call 0.3 s later: progress is due
    monkeypatch.setattr(aof.time, "time", lambda: next(clock))
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        node = NodeState(b"b" * 40, now=1_000_000)
        assert p.load(node) == 21
    finally:
        globalLogPublisher.removeObserver(events.append)
        p.close()
    assert len(node.jobs) == 19 and jobs[0].id not in node.jobs  # the DELJOB applied
    assert all(j.state == ACTIVE for j in node.jobs.values())  # not queued after a crash
    assert not node.queues.get(b"q") or len(node.queues.get(b"q").jobs) == 0
    texts = [e.get("log_format", "") for e in events]
    assert any("Loading the AOF" in t for t in texts) and any("AOF loaded" in t for t in texts)


def test_aof_off_ignores_the_file_unless_it_is_a_controlled_restart(tmp_path):
    write_jobs(tmp_path, 5)
    node = NodeState(b"b" * 40, now=1_000_000)
    assert aof.AOFPersistence(config(tmp_path)).load(node) == 0 and len(node.jobs) == 0
    data = (tmp_path / "disque.aof").read_bytes()
    (tmp_path / "disque.aof").write_bytes(aof.MARKER + data)
    assert aof.AOFPersistence(config(tmp_path)).load(node) == 7
    assert len(node.queues.get(b"q").jobs) == 4  # queued again: a controlled restart
    assert not (tmp_path / "disque.aof").exists() and (tmp_path / "disque.aof.loaded").exists()
