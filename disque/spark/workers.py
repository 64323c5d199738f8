"""Can Spark's Python workers import the connector?

Every method of the data source but one runs in a Python worker that Spark
starts with ``PYSPARK_PYTHON`` (``python3`` from ``PATH`` when it is not
set, whatever interpreter runs the driver): ``schema()``, ``reader()``,
``partitions()`` and ``writer()`` in workers on the driver's host,
``read()`` and ``write()`` in the executors'.  Each first unpickles
:class:`~.source.DisqueDataSource`, that is imports ``disque.spark``.  A
worker interpreter without disque's dependencies fails there, and the
query fails with that worker's traceback wrapped in Spark's (an
``AnalysisException`` of a dozen lines ending in ``No module named
'hiredis'``), which names neither the interpreter nor the cause.

The one method Spark calls in the driver's own Python process is
:meth:`~.source.DisqueDataSource.name`, when ``spark.dataSource.register``
registers the source; it calls :func:`check_workers`, which runs one
one-task job whose task imports ``disque.spark`` in a worker and reports
that worker's ``sys.executable`` and the import's error.  An error is
raised in the driver as :class:`WorkerPythonError`, one line naming both
interpreters and ``PYSPARK_PYTHON``.  A success is remembered for the
SparkContext: one job per session, and none in local mode when the
workers run the driver's interpreter (the setting the docs give).  The job
adds 1-1.5 s to the session's first registration on a busy 2-core machine
(Spark's first Python job of a session starts the worker daemon), 0.4-0.8 s
after another Python job (docs/spark.md, Troubleshooting).

The task's function is pickled by value (a nested function), so the worker
runs it without importing anything of disque first.
"""

import os
import shutil
import sys
import threading
import weakref

from .connection import DisqueSparkError

__all__ = ["WorkerPythonError", "check_workers", "describe", "same_interpreter"]

#: The job's description in Spark's UI.
JOB_DESCRIPTION = "disque: can the Python workers import disque.spark?"


class WorkerPythonError(DisqueSparkError):
    """Spark's Python workers cannot import ``disque.spark``."""


_checked = weakref.WeakKeyDictionary()  # SparkContext -> the workers' report
_lock = threading.Lock()


def _probe_job(sc):
    """[(sys.executable, cwd, folder of the package ``disque`` found or
    None, the import's error or None)] from one task in a Python worker."""

    def probe(_):
        import importlib.util
        import os
        import sys

        try:
            spec = importlib.util.find_spec("disque")
            found = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
        except Exception:  # a broken package: the import below says why
            found = None
        try:
            import disque.spark  # noqa: F401
            error = None
        except Exception as e:  # ImportError mostly; anything the import raises
            error = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return [(sys.executable, os.getcwd(), found, error)]

    previous = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(JOB_DESCRIPTION)
    try:
        return sc.parallelize([0], 1).mapPartitions(probe).collect()
    finally:
        sc.setLocalProperty("spark.job.description", previous)


def describe(report, driver=None):
    """The one-line message for a worker's report ``(executable, cwd,
    found, error)``, or None when its import worked.  ``driver``: the
    driver's interpreter (``sys.executable``)."""
    executable, cwd, found, error = report
    if error is None:
        return None
    driver = driver or sys.executable
    if found is None:
        where = ""
    elif os.path.dirname(os.path.realpath(found)) == os.path.realpath(cwd):
        where = "; it found disque in its current directory, %s" % found
    else:
        where = "; it found disque in %s" % found
    if executable == driver:
        return ("disque: Spark's Python workers run %s, as the driver does, but cannot import disque.spark "
                "there (%s%s): check PYTHONPATH and the workers' current directory." % (executable, error, where))
    return ("disque: Spark's Python workers run %s, which cannot import %s (%s%s); the driver runs %s. "
            "Set PYSPARK_PYTHON (or spark.pyspark.python with spark-submit) to the driver's interpreter."
            % (executable or "an unknown interpreter", "disque's dependencies" if found else "disque",
               error, where, driver))


def same_interpreter(python_exec, driver):
    """True when the workers' ``python_exec`` (a path, or a name looked up
    on PATH) is the interpreter ``driver``, environment included: the same
    file reached from the same folder (a venv's ``bin/python`` is a link to
    its base interpreter, whose environment is another)."""
    found = shutil.which(python_exec)
    if not found:
        return False
    a, b = os.path.abspath(found), os.path.abspath(driver)
    return os.path.dirname(a) == os.path.dirname(b) and os.path.realpath(a) == os.path.realpath(b)


def check_workers(sc=None):
    """Raise :class:`WorkerPythonError` unless Spark's Python workers can
    import ``disque.spark``.  ``sc``: the SparkContext (default: the
    active one; without one, as in a Python worker or a Spark Connect
    client, there is nothing to check from here).  Once it succeeded for a
    SparkContext it returns at once.

    No job is run in local mode when the workers run the driver's own
    interpreter (``PYSPARK_PYTHON`` is ``sys.executable``, as the docs'
    example sets it): they have the packages the driver has.  (Left out
    there: a checkout in the current directory, which the workers import
    before the installed package, that cannot be imported.)"""
    if sc is None:
        try:
            from pyspark import SparkContext
        except ImportError:  # pragma: no cover (a Spark Connect-only client)
            return
        sc = SparkContext._active_spark_context
        if sc is None:
            return
    with _lock:
        if sc in _checked:
            return
        if sc.master.startswith("local") and same_interpreter(sc.pythonExec, sys.executable):
            _checked[sc] = []
            return
        reports = _probe_job(sc)
        for report in reports:
            message = describe(report)
            if message:
                raise WorkerPythonError(message)
        _checked[sc] = reports
