"""Process facts for INFO: the resident set, CPU times, the compiler that
built the interpreter, the struct sizes the memory estimate charges, and
the node's identity as a process (run id, uptime, pid, executable).

Nothing here changes the node; :class:`ProcessFacts` only remembers the
peak of the resident set, sampled at each tick and at each INFO.
"""

import os
import platform
import re
import resource
import sys

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss() -> int:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _gcc_version() -> str:
    """INFO gcc_version: the GCC that built the Python interpreter running
    the node (this project compiles nothing itself), or 0.0.0 when it was
    not GCC, as the original reports without GCC."""
    m = re.search(r"GCC (\d+)\.(\d+)\.(\d+)", platform.python_compiler())
    return ".".join(m.groups()) if m else "0.0.0"


class ProcessFacts:
    """What INFO tells about the process running one node."""

    def __init__(self, reactor):
        self.reactor = reactor
        self.start_time = reactor.seconds()
        self.run_id = os.urandom(20).hex()
        self.peak_memory = 0

    def sample_rss(self) -> int:
        """The resident set now (the peak follows)."""
        rss = _rss()
        if rss > self.peak_memory:
            self.peak_memory = rss
        return rss

    def process_info(self):
        uname = platform.uname()
        reactor = self.reactor
        return {
            "build_id": self.run_id[:16],
            "os": "%s %s %s" % (uname.system, uname.release, uname.machine),
            "arch_bits": 64 if sys.maxsize > 2**32 else 32,
            "multiplexing_api": getattr(reactor, "multiplexing_api", None)
            or type(reactor).__name__.replace("Reactor", "").lower() or "twisted",
            "gcc_version": _gcc_version(),
            "runtime": "%s %s" % (platform.python_implementation(), platform.python_version()),
            "process_id": os.getpid(),
            "run_id": self.run_id,
            "uptime": int(reactor.seconds() - self.start_time),
            "executable": os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else sys.executable,
        }

    @staticmethod
    def cpu_times():
        t = os.times()
        return t.system, t.user, t.children_system, t.children_user

    @staticmethod
    def struct_sizes():
        # The sizes the memory estimate charges (INFO used_memory): the
        # same on every runtime (PyPy has no sys.getsizeof).
        from ..core.memory import JOB_OVERHEAD, QUEUE_OVERHEAD

        return b"bits:64 job:%d queue:%d" % (JOB_OVERHEAD, QUEUE_OVERHEAD)
