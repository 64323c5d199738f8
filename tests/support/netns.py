"""Network namespaces for tests that need addresses beyond loopback.

:class:`Namespace` makes a namespace joined to the test's own namespace by
a veth pair on a private /30: the namespace's end has ``inside``
(10.213.x.2), ours has ``outside`` (10.213.x.1).  Nothing else is routed
there, so traffic between the two goes nowhere else.  A node run in the
namespace (``NodeProcess(prefix=ns.prefix, host=ns.inside)``) is bound to
a non-loopback address, and a client of ours reaches it from one
(``outside``): what a stranger on the network looks like to the node.  A
client run inside (``ns.run(...)``) dialling ``inside`` is non-loopback
too (its source is ``inside``).

Creating namespaces needs root (CAP_NET_ADMIN) and ``ip``; :func:`problem`
says why they cannot be made, for a skip whose reason holds wherever it
shows (``.ci/run`` runs the suite as root).
"""

import itertools
import os
import shutil
import subprocess

from .ports import worker_index

_SEQ = itertools.count()


def _ip(*args, check=True):
    return subprocess.run(("ip",) + args, capture_output=True, text=True, check=check, timeout=10)


_PROBLEM = []


def problem():
    """Why namespaces cannot be made here, or None (tried once)."""
    if not _PROBLEM:
        if os.geteuid() != 0:
            _PROBLEM.append("network namespaces need root (CAP_NET_ADMIN); .ci/run runs the suite as root")
        elif shutil.which("ip") is None:
            _PROBLEM.append("network namespaces need the ip command (iproute2)")
        else:
            try:
                Namespace().close()
                _PROBLEM.append(None)
            except (subprocess.SubprocessError, OSError) as e:
                _PROBLEM.append("cannot make a network namespace here: %s" % (getattr(e, "stderr", "") or e))
    return _PROBLEM[0]


def fixture(scope="function"):
    """A pytest fixture giving a :class:`Namespace`, closed after its
    scope, or skipping with :func:`problem`'s reason."""
    import pytest

    @pytest.fixture(scope=scope)
    def ns():
        why = problem()
        if why:
            pytest.skip(why)
        namespace = Namespace()
        yield namespace
        namespace.close()
    return ns


class Namespace:
    """One namespace and its veth pair (see the module docstring); close()
    removes both (so does the namespace's removal, for the veth)."""

    def __init__(self):
        # a /30 of this worker's 1,600 (10.213.0.0/16 has 16,384), so two
        # workers' namespaces never share addresses
        n = worker_index() * 1600 + (os.getpid() * 7 + next(_SEQ)) % 1600
        self.name = "dq%d-%d" % (os.getpid() % 100000, next(_SEQ))
        self.outside = "10.213.%d.%d" % (n // 64, (n % 64) * 4 + 1)
        self.inside = "10.213.%d.%d" % (n // 64, (n % 64) * 4 + 2)
        ours, theirs = "%so" % self.name, "%si" % self.name
        self.prefix = ("ip", "netns", "exec", self.name)
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", ours, "type", "veth", "peer", "name", theirs)
            _ip("link", "set", theirs, "netns", self.name)
            _ip("addr", "add", self.outside + "/30", "dev", ours)
            _ip("link", "set", ours, "up")
            self.run("ip", "addr", "add", self.inside + "/30", "dev", theirs)
            self.run("ip", "link", "set", theirs, "up")
            self.run("ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise
        self._ours = ours

    def run(self, *argv, **kwargs):
        """Run ``argv`` inside the namespace (``subprocess.run``, checked)."""
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        kwargs.setdefault("timeout", 30)
        kwargs.setdefault("check", True)
        return subprocess.run(self.prefix + tuple(argv), **kwargs)

    def close(self):
        _ip("link", "del", "%so" % self.name, check=False)
        _ip("netns", "del", self.name, check=False)
