"""PyPy's nursery bounded before the node starts (disque.node.nursery): the
decision, and the one re-execution it asks for."""

import sys

from disque.node import nursery
from disque.node.nursery import MAX_NURSERY, bounded_environment, bound_nursery


TWISTD = ["/opt/disque/bin/twistd", "-n", "disque"]
BIG = 240 * 1024 * 1024


def bounded(environ, nursery, argv):
    """bounded_environment, with TWISTD's script taken as a file."""
    return bounded_environment(environ, nursery, argv, is_file=lambda path: path == TWISTD[0])


def test_a_nursery_above_the_bound_runs_again_with_the_bound():
    environ = {"PATH": "/bin"}
    env = bounded(environ, BIG, TWISTD)
    assert env == {"PATH": "/bin", "PYPY_GC_NURSERY": "16M"}
    assert environ == {"PATH": "/bin"}  # (a new dict)


def test_nothing_changes_within_the_bound_off_pypy_or_when_chosen():
    assert bounded({}, MAX_NURSERY, TWISTD) is None
    assert bounded({}, 1024 * 1024, TWISTD) is None
    assert bounded({}, None, TWISTD) is None  # CPython
    assert bounded({"PYPY_GC_NURSERY": "240M"}, BIG, TWISTD) is None


def test_only_a_twistd_process_runs_again():
    """A process that builds the node in process (a test calling
    makeService: pytest, an xdist worker) is never replaced."""
    assert bounded({}, BIG, ["/usr/bin/pytest", "tests"]) is None
    assert bounded({}, BIG, ["-c"]) is None
    assert bounded({}, BIG, []) is None


def test_a_twistd_that_is_no_file_goes_on_as_it_is():
    """A program running twistd's run() itself, argv[0] set to "twistd"
    (tests/tools/faultnode.py): there is no script to run again."""
    assert bounded_environment({}, BIG, ["twistd", "-n", "disque"]) is None
    assert bounded_environment({}, BIG, ["/nowhere/bin/twistd", "-n", "disque"]) is None


def test_bound_nursery_executes_the_same_command_again(monkeypatch):
    calls = []
    monkeypatch.setattr(nursery, "nursery_bytes", lambda: BIG)
    monkeypatch.setattr(sys, "argv", TWISTD)
    monkeypatch.setattr(nursery.os.path, "isfile", lambda path: path == TWISTD[0])
    monkeypatch.delenv("PYPY_GC_NURSERY", raising=False)
    bound_nursery(execve=lambda *args: calls.append(args))
    [(exe, argv, env)] = calls
    assert exe == sys.executable and argv == [sys.executable] + TWISTD
    assert env["PYPY_GC_NURSERY"] == "16M"
    monkeypatch.setenv("PYPY_GC_NURSERY", "16M")  # the run again: goes on
    bound_nursery(execve=lambda *args: calls.append(args))
    assert len(calls) == 1
