"""Partitions of a local cluster with iptables, and their removal.

Every node of the fault suite has its own address (127.0.0.x) and its bus
links leave from it (``bind``; see ``disque/node/listeners.py``), so a bus
connection between two nodes is told apart from every other connection of
the machine by its two addresses and the bus port of the side that
listens.  A partition DROPs exactly those packets, both ways, for every
pair of nodes on different sides; clients (from 127.0.0.1) still reach
every node.

The rules live in one chain of this process, ``DISQUE-NEMESIS-<pid>``,
jumped to from INPUT and OUTPUT.  Invariant: once :meth:`Partitioner.close`
ran -- it runs from ``try/finally``, ``atexit`` and SIGTERM/SIGINT -- the
chain and both jumps are gone, whatever happened.
"""

import atexit
import shutil
import signal
import subprocess
import os


def _iptables(*args):
    """Run ``iptables -w ARGS``; (returncode, stderr)."""
    p = subprocess.run(["iptables", "-w", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    return p.returncode, p.stderr.strip()


def unavailable():
    """Why partitions cannot be made here (a sentence), or None when a chain
    can be created and removed."""
    if shutil.which("iptables") is None:
        return "iptables is not installed (apt-get install iptables)"
    if os.geteuid() != 0:
        return "iptables rules need root (running as uid %d)" % os.geteuid()
    probe = "DISQUE-PROBE-%d" % os.getpid()
    rc, err = _iptables("-N", probe)
    if rc != 0:
        return "iptables cannot create a chain here: %s" % (err or "exit %d" % rc)
    _iptables("-X", probe)
    return None


class Partitioner:
    """Cuts and heals the bus between groups of ``(address, bus_port)``."""

    def __init__(self):
        self.chain = "DISQUE-NEMESIS-%d" % os.getpid()
        self.open = False
        self.previous = {}

    def __enter__(self):
        rc, err = _iptables("-N", self.chain)
        if rc != 0:
            raise RuntimeError("iptables -N %s: %s" % (self.chain, err))
        self.open = True
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.previous[sig] = signal.signal(sig, self._on_signal)
        for hook in ("INPUT", "OUTPUT"):
            rc, err = _iptables("-I", hook, "-j", self.chain)
            if rc != 0:
                self.close()
                raise RuntimeError("iptables -I %s -j %s: %s" % (hook, self.chain, err))
        return self

    def __exit__(self, *exc):
        self.close()

    def _on_signal(self, sig, frame):
        self.close()
        raise SystemExit(128 + sig)

    def cut(self, side_a, side_b):
        """DROP the bus traffic between every node of ``side_a`` and every
        node of ``side_b`` (lists of ``(address, bus_port)``), both ways."""
        for a, a_bus in side_a:
            for b, b_bus in side_b:
                for src, dst, port in ((a, b, b_bus), (b, a, a_bus)):
                    # Connections src -> dst's bus, and their replies.
                    self._add("-s", src, "-d", dst, "-p", "tcp", "--dport", str(port))
                    self._add("-s", dst, "-d", src, "-p", "tcp", "--sport", str(port))

    def _add(self, *match):
        rc, err = _iptables("-A", self.chain, *match, "-j", "DROP")
        if rc != 0:
            raise RuntimeError("iptables -A %s: %s" % (self.chain, err))

    def heal(self):
        """Remove every rule of the chain (the chain stays)."""
        if self.open:
            _iptables("-F", self.chain)

    def close(self):
        """Remove the jumps and the chain; idempotent."""
        if not self.open:
            return
        self.open = False
        for hook in ("INPUT", "OUTPUT"):
            while _iptables("-D", hook, "-j", self.chain)[0] == 0:
                pass
        _iptables("-F", self.chain)
        _iptables("-X", self.chain)
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}
