"""The worker against real clusters: ACK, NACK and WORKING under load, the
graceful stop, a node killed under it, workers of two tenants (users with
their own queues) on one node, and ``twistd disque-worker``."""

import os
import signal
import subprocess
import sys
import time

from twisted.internet import task

from disque.client import BlockingClient, DisqueClient
from disque.worker import Worker
from tests.support.process import ROOT, call, start_tenants, wait_for
from tests.support.tx import reactor, run


def seeds(nodes):
    return [("127.0.0.1", n.port) for n in nodes]


class Recorder:
    """A handler that records every call, fails the first delivery of jobs
    whose body starts with ``fail``, and takes ``slow_s`` for ``slow`` jobs
    (its clock is the reactor's: it runs in the reactor thread)."""

    def __init__(self, slow_s=2.5, fast_s=0.01):
        self.calls = {}      # job id -> number of handler calls
        self.running = 0
        self.max_running = 0
        self.slow_s, self.fast_s = slow_s, fast_s
        self.started_after_stop = 0
        self.stopping = False

    def __call__(self, job):
        self.calls[job.id] = self.calls.get(job.id, 0) + 1
        if self.stopping:
            self.started_after_stop += 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)

        def done():
            self.running -= 1
            if job.body.startswith(b"fail") and job.nacks == 0:
                raise RuntimeError("first delivery of %s fails" % job.id)

        delay = self.slow_s if job.body.startswith(b"slow") else self.fast_s
        return task.deferLater(reactor(), delay, done)


def _add(client, queue, bodies, **options):
    return {client.add_job(queue, body, **options): body for body in bodies}


def _queued_or_active(nodes, queue):
    """Jobs of ``queue`` still queued or active anywhere."""
    left = set()
    for n in nodes:
        for state in ("queued", "active"):
            cursor = b"0"
            while True:
                cursor, ids = call(n, "JSCAN", cursor, "QUEUE", queue, "STATE", state)
                left.update(ids)
                if cursor == b"0":
                    break
    return left


def test_worker_acks_nacks_and_sends_working_under_load(trio):
    producer = BlockingClient(seeds(trio))
    bodies = ["job%d" % i for i in range(200)] + ["fail%d" % i for i in range(20)]
    jobs = _add(producer, "wq", bodies, replicate=2, retry=5)
    handler = Recorder()
    worker = Worker(handler, ["wq"], nodes=seeds(trio), concurrency=8, reactor=reactor())
    run(worker.startService)
    try:
        wait_for(lambda: run(lambda: worker.stats["acked"]) >= len(jobs), timeout=60, interval=0.2,
                 what="the backlog acknowledged")
        # Jobs with RETRY 1 that run 2.5 s, taken at once by the idle worker:
        # without WORKING every copy would queue them again after 1 s.  (A
        # RETRY counts from when a copy last heard of the job, so one that
        # waits in a backlog longer than its RETRY may be delivered twice
        # whatever the worker does: at-least-once.)
        jobs.update(_add(producer, "wq", ["slow%d" % i for i in range(6)], replicate=2, retry=1))
        wait_for(lambda: run(lambda: worker.stats["acked"]) >= len(jobs), timeout=60, interval=0.2,
                 what="every job acknowledged")
    finally:
        run(worker.stopService)
    stats = worker.stats
    for job_id, body in jobs.items():
        expected = 2 if body.startswith("fail") else 1  # no redelivery, not even of slow RETRY 1 jobs
        assert handler.calls.get(job_id) == expected, (body, handler.calls.get(job_id))
    assert stats["failed"] == stats["nacked"] == 20
    assert stats["succeeded"] == stats["acked"] == len(jobs)
    assert stats["heartbeats"] >= 6 * 4  # 2.5 s jobs, RETRY 1: WORKING at 0.5 s, then every 0.5 s
    assert 1 < handler.max_running <= 8
    assert _queued_or_active(trio, "wq") == set()
    producer.close()


def test_graceful_stop_under_load(trio):
    producer = BlockingClient(seeds(trio))
    jobs = _add(producer, "gs", ["slow%d" % i for i in range(40)], replicate=2, retry=30)
    handler = Recorder(slow_s=0.4)
    worker = Worker(handler, ["gs"], nodes=seeds(trio), concurrency=4, reactor=reactor())
    run(worker.startService)
    wait_for(lambda: run(lambda: worker.stats["acked"]) >= 8, timeout=30, what="work under way")

    def stop():
        handler.stopping = True
        return worker.stopService()

    started = time.monotonic()
    run(stop)
    assert time.monotonic() - started < 5  # the running jobs and the GETJOB in flight, no more
    handled = set(handler.calls)
    assert handler.running == 0 and worker.running_jobs == 0
    # Only the jobs of the GETJOB in flight at the stop may start after it.
    assert handler.started_after_stop <= 4
    assert worker.stats["acked"] == len(handled)  # everything started was finished and acknowledged
    left = _queued_or_active(trio, "gs")
    assert left == {j.encode() for j in jobs} - {j.encode() for j in handled}  # the rest waits, queued
    producer.close()


def test_worker_survives_the_death_of_its_node(trio):
    producer = BlockingClient(seeds(trio))
    jobs = _add(producer, "kq", ["job%d" % i for i in range(150)], replicate=3, retry=1)
    handler = Recorder(fast_s=0.02)
    client = DisqueClient(seeds(trio), reactor=reactor(), switch_window=None)
    worker = Worker(handler, ["kq"], client=client, concurrency=4, reactor=reactor())
    run(worker.startService)
    wait_for(lambda: run(lambda: worker.stats["acked"]) >= 20, timeout=30, what="work under way")
    victim = next(n for n in trio if ("127.0.0.1", n.port) == run(lambda: client.node_address))
    victim.kill()
    try:
        wait_for(lambda: set(jobs) <= set(handler.calls), timeout=60, interval=0.2,
                 what="every job handled after the kill")
    finally:
        run(worker.stopService)
        run(client.disconnect)
    assert run(lambda: client.node_address) != ("127.0.0.1", victim.port)
    producer.close()


def test_workers_of_two_tenants(tmp_path):
    node = start_tenants(tmp_path / "tenants")
    alice = {"username": "alice", "password": "alicepw"}
    bob = BlockingClient(seeds([node]), username="bob", password="bobpw")
    producer = BlockingClient(seeds([node]), **alice)
    workers = []

    def start(queues):
        worker = Worker(Recorder(fast_s=0.01), queues, nodes=seeds([node]), client_options=alice,
                        fetch_timeout=100, reactor=reactor())
        workers.append(worker)
        run(worker.startService)
        return worker
    try:
        theirs = bob.add_job("b:w", "bob's", retry=60)
        mine = _add(producer, "a:w", ["j%d" % i for i in range(5)], retry=60)
        own = start(["a:w"])
        wait_for(lambda: run(lambda: own.stats["acked"]) == len(mine), timeout=20, what="alice's jobs acked")
        assert set(own.handler.calls) == set(mine)
        # A worker of alice's on bob's queue is refused its GETJOB (logged,
        # tried again a second later): it takes nothing, bob's job stays his.
        other = start(["b:w"])
        wait_for(lambda: run(lambda: other.stats["fetch_errors"]) >= 1, timeout=20, what="a refused GETJOB")
        assert run(lambda: other.stats["fetched"]) == 0 and other.handler.calls == {}
        assert bob.qlen("b:w") == 1 and bob.show(theirs)["state"] == "queued"
    finally:
        for worker in workers:
            run(worker.stopService)
        bob.close()
        producer.close()
        node.stop()


HANDLER = '''
import os, time
LOG = os.environ["WORKER_LOG"]

def handle(job):
    with open(LOG, "a") as f:
        f.write("start %s %s\\n" % (job.id, job.body.decode()))
    if job.body == b"boom" and job.nacks == 0:
        raise ValueError("boom")
    if job.body == b"slow":
        time.sleep(2.0)
    with open(LOG, "a") as f:
        f.write("done %s %s\\n" % (job.id, job.body.decode()))
'''


def test_twistd_disque_worker(trio, tmp_path):
    (tmp_path / "jobs_mod.py").write_text(HANDLER)
    log = tmp_path / "handled.log"
    producer = BlockingClient(seeds(trio))
    ids = _add(producer, "tw", ["a", "b", "boom", "c"], replicate=2)
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    proc = subprocess.Popen(
        [twistd, "-n", "--pidfile=", "-l", str(tmp_path / "worker.log"), "disque-worker",
         "--handler", "jobs_mod:handle", "--queues", "tw", "--threads", "-c", "2",
         "--nodes", ",".join("127.0.0.1:%d" % n.port for n in trio)],
        cwd=str(tmp_path), env=dict(os.environ, WORKER_LOG=str(log)))
    try:
        wait_for(lambda: log.exists() and log.read_text().count("done ") == 4, timeout=30,
                 what="the four jobs handled")
        worker_log = (tmp_path / "worker.log").read_text()
        # notice by default: no debug line ("using node ..."), no repr, but the failed job's traceback
        assert "#debug]" not in worker_log and " object at 0x" not in worker_log, worker_log
        assert "[disque.worker.service.Worker#error] disque worker: handler failed on job" in worker_log
        lines = log.read_text().splitlines()
        boom = [l for l in lines if l.endswith(" boom")]
        assert [l.split()[0] for l in boom] == ["start", "start", "done"]  # failed, NACKed, redelivered
        slow_id = producer.add_job("tw", "slow", replicate=2)
        wait_for(lambda: "start %s slow" % slow_id in log.read_text(), timeout=10, what="the slow job starts")
        proc.send_signal(signal.SIGTERM)
        # twistd stops gracefully, then exits by the signal that stopped it.
        assert proc.wait(15) == -signal.SIGTERM
        assert "done %s slow" % slow_id in log.read_text()  # finished before the worker stopped
        assert _queued_or_active(trio, "tw") == set()  # and acknowledged
        assert set(ids) | {slow_id} == {l.split()[1] for l in log.read_text().splitlines()}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        producer.close()


EXAMPLES = os.path.join(ROOT, "examples", "client")


def test_client_examples(tmp_path):
    """examples/client as docs/client.md runs them: the .tac (a node and a
    worker in one application), the producer, twistd disque-worker with
    jobs.py, and the blocking consumer."""
    from tests.support.process import free_port

    port = free_port()
    bindir = os.path.dirname(sys.executable)
    tac = subprocess.Popen([os.path.join(bindir, "twistd"), "-ny", os.path.join(EXAMPLES, "node_and_worker.tac"),
                            "--pidfile=", "-l", str(tmp_path / "tac.log")],
                           cwd=str(tmp_path), env=dict(os.environ, DISQUE_PORT=str(port)))
    try:
        c = BlockingClient([port], failover_timeout=15)
        assert c.qlen("orders") == 0  # waits for the node to come up
        out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "producer.py"), "--nodes",
                              "127.0.0.1:%d" % port, "--count", "5"], capture_output=True, text=True, timeout=60)
        ids = out.stdout.split()
        assert len(ids) == 5 and all(i.startswith("D-") for i in ids), out.stderr
        wait_for(lambda: all("order %s: order" % i in (tmp_path / "tac.log").read_text() for i in ids),
                 timeout=20, what="the embedded worker handles the orders")
        assert c.qlen("orders") == 0
        # The same handlers under twistd disque-worker, on another queue.
        worker = subprocess.Popen([os.path.join(bindir, "twistd"), "-n", "--pidfile=", "-l", str(tmp_path / "w.log"),
                                   "disque-worker", "--handler", "jobs:handle_order", "--queues", "other",
                                   "--nodes", "127.0.0.1:%d" % port], cwd=EXAMPLES)
        try:
            job_id = c.add_job("other", "for the twistd worker")
            wait_for(lambda: (tmp_path / "w.log").exists() and job_id in (tmp_path / "w.log").read_text(),
                     timeout=20, what="twistd disque-worker handles the job")
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(15)
        for i in range(3):
            c.add_job("blocking", "b%d" % i)
        out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "blocking_consumer.py"), "--nodes",
                              "127.0.0.1:%d" % port, "--queue", "blocking"], capture_output=True, text=True, timeout=60)
        assert sorted(line.split()[1] for line in out.stdout.splitlines()) == ["b0", "b1", "b2"], out.stderr
        assert c.qlen("blocking") == 0
        c.close()
    finally:
        tac.send_signal(signal.SIGTERM)
        tac.wait(15)
