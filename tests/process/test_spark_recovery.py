"""Killed drivers: a Spark driver process killed with SIGKILL in the middle
of a micro-batch and restarted from its checkpoint loses nothing.

* Streaming read: every job reaches the sink (an fsynced append-only file
  written by foreachBatch) at least once and every job ends acknowledged.
* Streaming write: every input row becomes exactly one job (DEDUP keys of
  the replayed batch are the same: query id and batch id come from the
  checkpoint).

The two scenarios run side by side (one thread each, separate queues and
driver processes): most of their time is Spark start-up."""

import json
import threading

import pytest

from tests.support.spark import (add_jobs, jscan_all, kill_driver, nodes_option, queued_bodies, run_driver,
                           stop_driver, total_qlen)
from tests.support.process import wait_for

READ_JOBS = 3000
FILES, ROWS_PER_FILE = 6, 400


def sink_lines(path):
    try:
        with open(path, "rb") as f:
            return [line for line in f.read().split(b"\n") if line]
    except FileNotFoundError:
        return []


def streaming_read_driver_killed_mid_batch_loses_nothing(nodes, tmp_path):
    sent = {}
    for i, node in enumerate(nodes):
        bodies = [b"k%d-%d" % (i, j) for j in range(READ_JOBS // 3)]
        sent.update(zip(add_jobs(node, "kr", bodies, "RETRY", 2), bodies))
    sink = str(tmp_path / "sink.txt")
    args = (nodes_option(nodes), "kr", tmp_path / "ckpt", sink, 300, 1.0)
    log = str(tmp_path / "driver.log")
    driver = run_driver("read", *args, log=log)
    try:
        # Two batches through the sink, then kill inside a later one: its
        # sink has begun (jobs taken, offset logged) and not written yet.
        wait_for(lambda: len(sink_lines(sink + ".batches")) >= 2 or driver.poll() is not None, 150,
                 what="two batches in the sink", interval=0.2)
        assert driver.poll() is None, open(log).read()[-3000:]
        wait_for(lambda: len(sink_lines(sink + ".begun")) > len(sink_lines(sink + ".batches")) >= 2,
                 30, what="a batch in its sink", interval=0.02)
        kill_driver(driver)
        killed_batch = int(sink_lines(sink + ".begun")[-1])
        written_before = len(sink_lines(sink + ".batches"))
        assert len(sink_lines(sink)) < READ_JOBS
        driver = run_driver("read", *args, log=log)
        wait_for(lambda: {line.split(b" ", 1)[0] for line in sink_lines(sink)} >= set(sent)
                 or driver.poll() is not None, 150, what="every job in the sink", interval=0.2)
        wait_for(lambda: not any(jscan_all(n, "QUEUE", "kr") for n in nodes), 60,
                 what="every job acknowledged and collected", interval=0.2)
    finally:
        stop_driver(driver)
    # The restarted query first replayed the batch it was killed in (by ID,
    # from the offset log), with the same jobs.
    replayed = sink_lines(sink + ".batches")[written_before]
    assert int(replayed.split()[0]) == killed_batch and int(replayed.split()[1]) > 0
    got = {}
    for line in sink_lines(sink):
        job_id, body = line.split(b" ", 1)
        got.setdefault(job_id, []).append(body)
    assert set(got) == set(sent), "lost: %d" % len(set(sent) - set(got))
    assert all(bodies[0] == sent[i] for i, bodies in got.items())
    assert total_qlen(nodes, "kr") == 0


def streaming_write_driver_killed_mid_batch_no_duplicates_no_losses(nodes, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    expected = set()
    for f in range(FILES):
        with open(source / ("part-%02d.json" % f), "w") as out:
            for r in range(ROWS_PER_FILE):
                body = "w-%d-%d" % (f, r)
                expected.add(body.encode())
                out.write(json.dumps({"body": body}) + "\n")
    # The first driver stops in its second micro-batch with rows of it
    # written (spark_support.write_driver's hold), whatever the speed of the
    # machine: killed there, it leaves a batch half written for sure.
    hold = tmp_path / "hold"
    hold.write_bytes(b"")
    args = (nodes_option(nodes), "kw", source, tmp_path / "ckpt", 0, hold)
    log = str(tmp_path / "driver.log")
    driver = run_driver("write", *args, log=log)
    try:
        def mid_batch():
            n = total_qlen(nodes, "kw")
            return n > ROWS_PER_FILE and n % ROWS_PER_FILE and n
        written = wait_for(lambda: mid_batch() or driver.poll() is not None, 150,
                           what="the second batch half written", interval=0.02)
        kill_driver(driver)
        hold.unlink()
        assert written is not True and total_qlen(nodes, "kw") < FILES * ROWS_PER_FILE, open(log).read()[-3000:]
        driver = run_driver("write", *args, log=log)
        driver.wait(150)
        assert b"write driver done" in open(log, "rb").read()
    finally:
        stop_driver(driver)
    bodies = queued_bodies(nodes, "kw")
    assert len(bodies) == len(set(bodies)), "duplicates: %d" % (len(bodies) - len(set(bodies)))
    assert set(bodies) == expected


@pytest.mark.slow
def test_killed_drivers_restarted_from_their_checkpoints(spark_cluster, tmp_path):
    scenarios = [streaming_read_driver_killed_mid_batch_loses_nothing,
                 streaming_write_driver_killed_mid_batch_no_duplicates_no_losses]
    errors = {}

    def run(scenario):
        workdir = tmp_path / scenario.__name__[:20]
        workdir.mkdir()
        try:
            scenario(spark_cluster, workdir)
        except BaseException as e:  # reported below, with the scenario's name
            errors[scenario.__name__] = e

    threads = [threading.Thread(target=run, args=(s,)) for s in scenarios]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise AssertionError("\n".join("%s: %s" % (name, e) for name, e in sorted(errors.items())))
