"""Helpers for the Spark connector's tests: a local SparkSession, a
pipelined job producer, cluster-wide JSCAN / QLEN, and driver
subprocesses that die with the test process."""

import os
import signal
import subprocess
import sys
import time

from tests.support.process import ROOT, Client, _die_with_parent

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
    "spark.sql.streaming.pollingDelay": "100ms",
    # Short-lived test JVMs on a small machine: skip the C2 compiler.
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def spark_env():
    """Environment for a Spark driver: workers run this interpreter."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return os.environ


def make_session(app="disque-tests", master="local[2,4]"):
    """A SparkSession with the ``disque`` source registered; ``local[2,4]``
    (2 threads, a task may fail 4 times) so task retries happen locally."""
    spark_env()
    from pyspark.sql import SparkSession

    from disque.spark import DisqueDataSource

    builder = SparkSession.builder.master(master).appName(app)
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(DisqueDataSource)
    return spark


def bare_python(folder):
    """The ``bin`` folder of a fresh venv made in ``folder`` (no pip, no
    packages: it cannot import disque's dependencies, whatever the
    machine has), of this interpreter's Python version (PySpark refuses
    workers of another minor version than the driver)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60)
    return os.path.join(str(folder), "bin")


def script_env(path_first=None, **extra):
    """The environment of a Spark script run as a user would run it: no
    PYSPARK_PYTHON or PYSPARK_DRIVER_PYTHON (this process may have set
    them, spark_env), loopback only, ``path_first`` ahead on PATH."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", **extra)
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(name, None)
    if path_first:
        env["PATH"] = path_first + os.pathsep + env.get("PATH", "")
    return env


def nodes_option(nodes):
    return ",".join("127.0.0.1:%d" % n.port for n in nodes)


def add_jobs(node, queue, bodies, *options, window=500):
    """ADDJOB every body on ``node`` (pipelined); returns the IDs."""
    c = Client(node.port)
    ids = []
    try:
        bodies = list(bodies)
        for i in range(0, len(bodies), window):
            chunk = bodies[i:i + window]
            c.send(b"".join(Client.encode("ADDJOB", queue, b, 0, *options) for b in chunk))
            for _ in chunk:
                reply = c.read(timeout=30)
                assert isinstance(reply, bytes) and reply.startswith(b"D-"), reply
                ids.append(reply)
    finally:
        c.close()
    return ids


def jscan_all(node, *args):
    """Every ID JSCAN lists on ``node`` (with extra JSCAN options)."""
    c = Client(node.port)
    out = []
    try:
        cursor = b"0"
        while True:
            cursor, ids = c.call("JSCAN", cursor, "COUNT", 1000, *args)
            out.extend(ids)
            if cursor == b"0":
                return out
    finally:
        c.close()


def qlen(node, queue):
    c = Client(node.port)
    try:
        return c.call("QLEN", queue)
    finally:
        c.close()


def total_qlen(nodes, queue):
    return sum(qlen(n, queue) for n in nodes)


def queued_bodies(nodes, queue):
    """Bodies of the queued jobs of ``queue``: each job is queued on
    exactly one node (its copies elsewhere are not), so each appears once."""
    out = []
    for node in nodes:
        c = Client(node.port)
        try:
            cursor = b"0"
            while True:
                cursor, jobs = c.call("JSCAN", cursor, "COUNT", 5000, "QUEUE", queue, "STATE", "queued",
                                      "REPLY", "ALL")
                out.extend(dict(zip(j[::2], j[1::2]))[b"body"] for j in jobs)
                if cursor == b"0":
                    break
        finally:
            c.close()
    return out


def run_driver(mode, *args, log=None):
    """Start ``python -m tests.support.spark MODE ARGS`` as a separate Spark
    driver process in its own process group (so its JVM and Python workers
    can be killed with it); it dies with the test process."""
    env = dict(spark_env())
    env["PYTHONPATH"] = os.path.join(ROOT, "tests") + os.pathsep + env.get("PYTHONPATH", "")
    out = open(log, "ab") if log else subprocess.DEVNULL
    try:
        return subprocess.Popen([sys.executable, "-m", "tests.support.spark", mode, *map(str, args)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                preexec_fn=_die_with_parent, start_new_session=True)
    finally:
        if log:
            out.close()


def kill_driver(proc):
    """SIGKILL a driver with everything in its process group (JVM, workers)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def stop_driver(proc, timeout=30):
    """Let a driver finish (or SIGTERM it), then clear its process group."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    kill_driver(proc)


# ----------------------------------------------------------------------
# Driver processes for the recovery tests (run by run_driver)
# ----------------------------------------------------------------------

def append_fsync(path, lines):
    """Append ``lines`` to ``path`` and fsync before returning: once a
    batch's sink has returned, its rows are on disk."""
    with open(path, "ab") as f:
        f.write(b"".join(line + b"\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())


def read_driver(nodes, queue, checkpoint, sink, max_jobs, batch_sleep):
    """Consume ``queue`` into the append-only file ``sink`` (one ``id body``
    line per job), sleeping ``batch_sleep`` s in each batch before the
    write.  ``sink.begun`` / ``sink.batches`` get a line when a batch's
    sink starts / has written, so a test can kill the driver in a batch."""
    spark = make_session("disque-read-driver", "local[2]")
    batch_sleep = float(batch_sleep)

    def sink_batch(df, batch_id):
        append_fsync(sink + ".begun", [b"%d" % batch_id])
        rows = df.select("id", "body").collect()
        time.sleep(batch_sleep)
        append_fsync(sink, [r.id.encode() + b" " + bytes(r.body) for r in rows])
        append_fsync(sink + ".batches", [b"%d %d" % (batch_id, len(rows))])

    query = (spark.readStream.format("disque").option("nodes", nodes).option("queue", queue)
             .option("maxJobsPerTrigger", max_jobs).option("workingInterval", 1).load()
             .writeStream.foreachBatch(sink_batch).option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    append_fsync(sink + ".started", [b"started"])
    query.awaitTermination()


#: The row of a file (its number in the body, "w-<file>-<row>") at which a
#: write driver with ``hold`` waits.
HOLD_ROW = 399


def write_driver(nodes, queue, source_dir, checkpoint, row_sleep, hold=""):
    """Copy the JSON files of ``source_dir`` (one file per micro-batch) to
    ``queue`` with Trigger.AvailableNow, each row slowed by ``row_sleep`` s.

    ``hold``: a file's path.  While that file exists, row ``HOLD_ROW`` of
    the second micro-batch (whichever file it reads) waits in the UDF: the
    driver stays in the middle of that batch, with rows of it written
    (those of the UDF's and the writer's groups before it), until the file
    goes or the driver is killed.  The held rows seen are listed in
    ``hold + ".seen"``."""
    spark = make_session("disque-write-driver", "local[2]")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    spark.conf.set("spark.sql.execution.pythonUDF.arrow.enabled", "false")
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType

    row_sleep = float(row_sleep)

    @F.udf(StringType())
    def slow(body):
        time.sleep(row_sleep)
        if hold and body.endswith("-%d" % HOLD_ROW):
            with open(hold + ".seen", "a") as seen:
                seen.write(body + "\n")
            with open(hold + ".seen") as seen:
                files_seen = len(set(seen.read().split()))  # (a row evaluated twice counts once)
            if files_seen >= 2:
                while os.path.exists(hold):
                    time.sleep(0.02)
        return body

    df = spark.readStream.schema("body string").option("maxFilesPerTrigger", 1).json(source_dir)
    if hold:  # two tasks a batch: one writes all its rows while the other waits at the held row
        df = df.repartition(2)
    df = df.select(slow("body").alias("body"))
    query = (df.writeStream.format("disque").option("nodes", nodes).option("queue", queue)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    print("write driver done", flush=True)


if __name__ == "__main__":
    {"read": read_driver, "write": write_driver}[sys.argv[1]](*sys.argv[2:])


def stream_reader(node, queue, **options):
    """A ``StreamReader`` of ``queue`` on ``node`` with the streaming read's
    ``options``, made as Spark makes it, with SIGTERM's handler put back
    (``nackDelayMs`` installs one: not in pytest's process)."""
    from disque.spark.options import STREAM_READ_MODE, parse_options
    from disque.spark.stream_read import StreamReader

    raw = {"nodes": "127.0.0.1:%d" % node.port, "queue": queue}
    raw.update(options)
    before = signal.getsignal(signal.SIGTERM)
    try:
        return StreamReader(parse_options(raw, STREAM_READ_MODE))
    finally:
        signal.signal(signal.SIGTERM, before)
