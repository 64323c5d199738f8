"""Registering the ``disque`` source checks that Spark's Python workers can
import it (disque/spark/workers.py): a driver whose workers run an
interpreter without disque's dependencies fails with one line naming both
interpreters and PYSPARK_PYTHON; a good one is checked once per
SparkContext."""

import os
import subprocess
import sys
import textwrap

import disque
import disque.spark.workers as workers
from tests.support.process import ROOT, free_port
from tests.support.spark import bare_python, script_env

#: The job of issue 29's report: register, then a first query.
JOB = textwrap.dedent("""\
    import sys
    from pyspark.sql import SparkSession
    from disque.spark import DisqueDataSource

    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.dataSource.register(DisqueDataSource)
    print("registered", flush=True)
    spark.read.format("disque").option("nodes", sys.argv[1]).option("queue", "q").load().collect()
    """)


def test_workers_without_the_dependencies_fail_with_one_line(tmp_path):
    """The reported case: the driver runs the venv's python (``.venv/bin/python
    job.py``, venv not activated, no PYSPARK_PYTHON), so Spark's workers run
    ``python3`` from PATH (here a fresh venv without packages) in the
    checkout, where they find disque but not hiredis."""
    bare = bare_python(tmp_path / "bare")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    p = subprocess.run([sys.executable, str(script), "127.0.0.1:%d" % free_port()], cwd=ROOT,
                       env=script_env(path_first=bare), capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "registered" not in p.stdout
    lines = [line for line in p.stderr.splitlines() if "disque: " in line]
    assert lines == [
        "disque.spark.workers.WorkerPythonError: disque: Spark's Python workers run %s, which cannot import "
        "disque's dependencies (No module named 'hiredis'; it found disque in its current directory, %s); "
        "the driver runs %s. Set PYSPARK_PYTHON (or spark.pyspark.python with spark-submit) to the "
        "driver's interpreter." % (os.path.join(bare, "python3"), os.path.join(ROOT, "disque"), sys.executable)
    ], p.stderr


def test_good_workers_are_checked_once_per_spark_context(spark, monkeypatch):
    """The tests' session: local, PYSPARK_PYTHON is this interpreter, so no
    job; made to probe, it probes once and remembers the workers' report."""
    sc = spark.sparkContext
    jobs = []

    def counted(sc):
        jobs.append(1)
        return probe(sc)

    probe = workers._probe_job
    monkeypatch.setattr(workers, "_probe_job", counted)
    monkeypatch.delitem(workers._checked, sc, raising=False)
    workers.check_workers()  # the active context: the session's
    assert (jobs, workers._checked[sc]) == ([], [])
    monkeypatch.delitem(workers._checked, sc)
    monkeypatch.setattr(workers, "same_interpreter", lambda python_exec, driver: False)
    workers.check_workers()
    workers.check_workers(sc)
    assert len(jobs) == 1
    [(executable, cwd, found, error)] = workers._checked[sc]
    assert (executable, error) == (sys.executable, None)
    assert found == os.path.dirname(os.path.abspath(disque.__file__))  # the copy this process runs
    assert sc.getLocalProperty("spark.job.description") is None  # the probe's description is not left behind


def test_same_interpreter_is_the_same_file_from_the_same_folder(tmp_path, monkeypatch):
    bare = bare_python(tmp_path / "bare")
    python, python3 = os.path.join(bare, "python"), os.path.join(bare, "python3")
    assert workers.same_interpreter(python3, python)
    # The venv's python is a link to its base interpreter: another environment.
    assert os.path.realpath(python) == os.path.realpath(sys._base_executable)
    assert not workers.same_interpreter(sys._base_executable, python)
    assert not workers.same_interpreter(python, sys.executable)
    monkeypatch.setenv("PATH", bare + os.pathsep + os.environ["PATH"])
    assert workers.same_interpreter("python3", python)
    assert not workers.same_interpreter("python3", sys.executable)
    assert not workers.same_interpreter(str(tmp_path / "none"), python)
