"""``twistd disque`` on PyPy bounds its nursery (disque.node.nursery): the
node that serves is the process started, run again with PYPY_GC_NURSERY
when PyPy's own choice was above the bound; elsewhere nothing changes."""

import os

from disque.node.nursery import bounded_environment, nursery_bytes
from tests.support.process import NodeProcess, twistd_path


def environment(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)


def test_the_node_runs_with_the_nursery_its_runtime_needs(tmp_path):
    # The node runs on this interpreter's twistd: the same runtime, the same machine.
    expected = bounded_environment(os.environ, nursery_bytes(), [twistd_path()])
    node = NodeProcess(tmp_path).start()
    try:
        assert node.client().call("PING") == b"PONG"
        env = environment(node.proc.pid)  # the same process, after its execve if any
        if expected is None:
            assert env.get(b"PYPY_GC_NURSERY") == (os.environ.get("PYPY_GC_NURSERY", "").encode() or None)
        else:
            assert env[b"PYPY_GC_NURSERY"] == expected["PYPY_GC_NURSERY"].encode()
    finally:
        node.stop()
