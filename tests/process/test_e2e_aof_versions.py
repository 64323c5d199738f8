"""The AOF across versions, for real: files this version writes, started
on the version before the catalog (commit 098cdc1, the last one before
CATALOG records, taken from this repository's history with ``git
archive``; tests/support/previous.py).  A file without catalog entries
loads there; one with them is refused there as any unknown record is, or
loaded without them under ``aof-load-damaged skip`` (docs/persistence.md,
"The catalog")."""

import pytest

from tests.support.previous import extract
from tests.support.process import NodeProcess, call, info, run_twistd, show, wait_for
from tests.support.resp import is_error

BEFORE_CATALOG = "098cdc1"
AOF = ("--appendonly", "yes", "--set", "appendfsync=always")
CATALOG_HEADER = b"*3\r\n$7\r\nCATALOG\r\n"


@pytest.fixture(scope="module")
def old_env(tmp_path_factory):
    """The environment that runs the version before the catalog."""
    return {"PYTHONPATH": extract(BEFORE_CATALOG, tmp_path_factory.mktemp("before-catalog"))}


def written_by_this_version(workdir, schedule):
    """Jobs added on a node of this version (a schedule among them if
    ``schedule``), through a rewrite and after it, then kill -9; returns
    (the node, the job IDs, the AOF's bytes)."""
    node = NodeProcess(workdir, args=AOF).start()
    try:
        ids = [call(node, "ADDJOB", "vq", "job-%d" % i, "0") for i in range(3)]
        if schedule:
            assert call(node, "SCHEDULE", "ADD", "nightly", "sq", "body", "CRON", "0 3 * * *") == b"OK"
        assert call(node, "BGREWRITEAOF") == b"Background append only file rewriting started"
        wait_for(lambda: info(node.client(), "persistence")["aof_rewrite_in_progress"] == "0", timeout=10,
                 what="rewrite done")
        ids.append(call(node, "ADDJOB", "vq", "after", "0"))
    finally:
        node.kill()
    with open(node.workdir + "/disque.aof", "rb") as f:
        return node, ids, f.read()


def test_a_file_without_catalog_entries_loads_on_the_version_before_the_catalog(tmp_path, old_env):
    node, ids, data = written_by_this_version(tmp_path / "n", schedule=False)
    assert CATALOG_HEADER not in data
    old = NodeProcess(node.workdir, port=node.port, args=AOF, env=old_env).start()
    try:
        assert is_error(call(old, "SCHEDULE", "LIST"))  # (the old version indeed)
        assert all(show(old, j) is not None for j in ids)
    finally:
        old.kill()


def test_a_file_with_catalog_entries_is_refused_by_the_version_before_the_catalog(tmp_path, old_env):
    node, ids, data = written_by_this_version(tmp_path / "n", schedule=True)
    at = data.index(CATALOG_HEADER)
    assert at == 0 and data.count(CATALOG_HEADER) == 1  # the rewrite writes the catalog first
    rc, out = run_twistd(["--dir", node.workdir, "--port", str(node.port), *AOF], tmp_path, env=old_env)
    assert rc == 1 and "Traceback" not in out
    assert ("disque: cannot load the append only file: unknown record b'CATALOG' after offset 0; a node whose "
            "jobs have copies on other nodes can start without the damaged records (aof-load-damaged skip); "
            "inspect or repair it with: python -m disque.tools.check_aof [--fix] " in out), out
    # With aof-load-damaged skip it starts without the catalog, and rewrites the file without it.
    old = NodeProcess(node.workdir, port=node.port, args=AOF + ("--set", "aof-load-damaged=skip"),
                      env=old_env).start()
    try:
        assert all(show(old, j) is not None for j in ids)
        assert "unknown record b'CATALOG'" in old.log()
    finally:
        old.kill()
    with open(node.workdir + "/disque.aof", "rb") as f:
        assert CATALOG_HEADER not in f.read()
