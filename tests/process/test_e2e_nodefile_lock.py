"""The node file serves one node (its lock, disque/node/nodefile_lock.py),
and a node's dir must exist, on real ``twistd -n disque`` processes: what
a second node on the same dir, or a node given a dir that is not there,
says and does."""

import os

from tests.support.process import NodeProcess, call, free_port, run_twistd


def test_a_second_node_on_the_same_node_file_refuses_to_start(tmp_path):
    first = NodeProcess(tmp_path / "shared").start()
    try:
        rc, out = run_twistd(["--port", str(free_port()), "--dir", str(tmp_path / "shared")], tmp_path)
        path = os.path.join(str(tmp_path / "shared"), "nodes.conf")
        assert rc != 0
        assert out == ("disque: the node file %s is in use by another node (pid %d): each node needs a dir, or a "
                       "cluster-config-file, of its own\n" % (path, first.proc.pid)), out
        assert call(first, "PING") == b"PONG"  # the first runs on
        # Another name in the same dir is another node file: it starts.
        other = NodeProcess(tmp_path / "shared", args=("--set", "cluster-config-file=other.conf")).start()
        other.kill()
        # kill -9 lets go of the lock: a node starts on the file again.
        first_id = call(first, "CLUSTER", "MYID")
        first.kill()
        again = NodeProcess(tmp_path / "shared").start()
        assert call(again, "CLUSTER", "MYID") == first_id
        again.stop()
    finally:
        first.kill()


def test_a_dir_that_does_not_exist_is_refused_in_one_line(tmp_path):
    missing = str(tmp_path / "not-there")
    rc, out = run_twistd(["--port", str(free_port()), "--dir", missing], tmp_path)
    assert rc != 0 and not os.path.exists(missing)
    assert out == ("disque: command-line option 'dir': invalid value '%s' for 'dir': can't use it as working "
                   "directory: No such file or directory: make it first (mkdir -p %s); the node does not create "
                   "its dir\n" % (missing, missing)), out
