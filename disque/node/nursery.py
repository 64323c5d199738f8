"""PyPy's nursery, bounded once per process before the node starts.

PyPy allocates every new object in its nursery and, at each minor
collection, copies the survivors (for a node: every new job, its ID and
its body) out to the old generation.  It sizes the nursery at half the
"cache size" of ``/proc/cpuinfo``, meant to be the L2 cache.  Virtual
machines often report something else there: the benchmark VM says
491520 KB, so PyPy takes a 240 MB nursery, far beyond any cache, and
each minor collection copies tens of thousands of jobs out of cold
memory.  In process that was half of a pipelined ADDJOB's time; with a
16 MB nursery a live node spent 20% less CPU per ADDJOB, pipelined or not
(docs/benchmarks.md, "Single node: ADDJOB pipelined against the original").

The nursery is read from ``PYPY_GC_NURSERY`` when the process starts,
never later.  So ``twistd disque`` on PyPy, when PyPy chose a nursery
above :data:`MAX_NURSERY` and ``PYPY_GC_NURSERY`` is not set, executes
itself again, once, with ``PYPY_GC_NURSERY`` set to that bound (the same
process: same PID, same open files; nothing has started yet).  Only a
process whose command is ``twistd`` does: one that builds the node service
in process otherwise (a test calling ``makeService``) is never replaced.  Setting
``PYPY_GC_NURSERY`` to any value keeps that value: the way to choose
another size, or PyPy's own choice.  CPython has no nursery: nothing
changes there.
"""

import os
import platform
import sys

MAX_NURSERY = 16 * 1024 * 1024
_ENV = "PYPY_GC_NURSERY"


def nursery_bytes():
    """The nursery PyPy chose for this process (bytes), or None (not PyPy)."""
    if platform.python_implementation() != "PyPy":
        return None
    import gc

    return gc.get_stats()._s.nursery_size


def bounded_environment(environ, nursery, argv, is_file=None):
    """The environment to run ``argv`` again with (a new dict), or None to
    go on: only when ``nursery`` (bytes, None off PyPy) is above the bound,
    ``environ`` does not choose one already and ``argv`` is a ``twistd``
    command line whose script is a file the interpreter can run again (a
    program that calls twistd's ``run()`` itself with ``argv[0]`` set to
    ``"twistd"`` is not one: it goes on as it is)."""
    if nursery is None or nursery <= MAX_NURSERY or _ENV in environ:
        return None
    if not argv or os.path.basename(argv[0]) != "twistd" or not (is_file or os.path.isfile)(argv[0]):
        return None
    return dict(environ, **{_ENV: "%dM" % (MAX_NURSERY // (1024 * 1024))})


def bound_nursery(execve=os.execve):
    """Run this process again with a bounded nursery if it needs one (see
    the module docstring); else return."""
    env = bounded_environment(os.environ, nursery_bytes(), sys.argv)
    if env is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        execve(sys.executable, [sys.executable] + sys.argv, env)
