"""The original Disque server (1.0-rc1) as a build to measure beside ours.

Benchmarks only: nothing in the tests or in CI may need it.  A build
argument of ``compare.py`` (and the other scripts that take builds) whose
file name starts with ``disque-server`` is the original: its nodes are
:class:`OriginalProcess`, started with ``--appendonly no`` in a fresh
directory, joined into clusters by the same chain of MEETs as ours.
"""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared", "bin", "disque-server-1.0rc1")

from tests.support.process import NodeProcess, join_nodes  # noqa: E402


def is_original(path):
    """Whether a build argument names the original server's binary."""
    return os.path.basename(path).startswith("disque-server")


def available(path=DEFAULT):
    """The original's binary if it is there and runs on this machine."""
    return path if os.access(path, os.X_OK) else None


class OriginalProcess(NodeProcess):
    """An original ``disque-server`` with the interface of ``NodeProcess``
    (port, proc, start, wait_ready, client, stop, kill)."""

    def __init__(self, workdir, binary=DEFAULT, port=None, args=(), host="127.0.0.1"):
        super().__init__(workdir, port=port, args=args, host=host, twistd=binary)
        self.logpath = os.path.join(self.workdir, "disque-server-%d.log" % self.port)

    def command(self):
        return [self.twistd, "--port", str(self.port), "--bind", self.host, "--dir", self.workdir,
                "--appendonly", "no", "--logfile", self.logpath] + self.args


def start_original_cluster(workdir, n, binary=DEFAULT, args=()):
    """``n`` original servers joined in a full mesh (see ``join_nodes``)."""
    return join_nodes([OriginalProcess(os.path.join(str(workdir), "orig%d" % i), binary, args=args)
                       for i in range(n)])
