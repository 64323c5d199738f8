"""disque.worker.Worker on a fake client and a fake clock: concurrency,
ACK/NACK, the WORKING schedule, fetch retries and the graceful stop, step
by step (the same worker against real nodes: test_e2e_worker.py)."""

import pytest
from twisted.internet import defer, task
from twisted.logger import LogLevel, capturedLogs, formatEvent

from disque.client import errors
from disque.client.job import Job
from disque.worker.service import FETCH_RETRY_S, Worker
from disque.worker.tap import Options, load_handler, makeService
from tests.support.deferreds import assertNoResult


class FakeClient:
    """Records the calls a worker makes; GETJOB waits until the test
    answers it with ``deliver``."""

    def __init__(self):
        self.fetches = []        # (count, Deferred) of each GETJOB
        self.calls = []          # ("ack"|"nack"|"working"|"fast_ack", job id)
        self.working_reply = 10  # the job's RETRY as WORKING answers it
        self.working_error = None
        self.disconnected = False

    def get_jobs(self, *queues, count=1, timeout=None):
        d = defer.Deferred()
        self.fetches.append((count, d))
        return d

    def deliver(self, *jobs):
        count, d = self.fetches[-1]
        assert not d.called and len(jobs) <= count
        d.callback(list(jobs))

    def ack(self, job):
        self.calls.append(("ack", job.id))
        return defer.succeed(1)

    def fast_ack(self, job):
        self.calls.append(("fast_ack", job.id))
        return defer.succeed(1)

    def nack(self, job, delay=None):
        self.calls.append(("nack", job.id) if delay is None else ("nack", job.id, delay))
        return defer.succeed(1)

    def working(self, job):
        self.calls.append(("working", job.id))
        if self.working_error is not None:
            return defer.fail(self.working_error)
        return defer.succeed(self.working_reply)

    def disconnect(self):
        self.disconnected = True
        return defer.succeed(None)


def job(n):
    return Job("q", "D-aaaaaaaa-%024d-0001" % n, b"body%d" % n, 0, 0, node="n")


def make(handler, **kw):
    clock = task.Clock()
    clock.suggestThreadPoolSize = lambda n: None
    client = FakeClient()
    worker = Worker(handler, ["q"], client=client, reactor=clock, **kw)
    worker.startService()
    return worker, client, clock


def test_success_is_acked_failure_is_nacked():
    def handler(j):
        if j.body == b"body2":
            raise ValueError("bad job")

    worker, client, clock = make(handler, concurrency=3)
    assert client.fetches[0][0] == 3  # COUNT = free slots
    client.deliver(job(1), job(2))
    assert client.calls == [("ack", job(1).id), ("nack", job(2).id)]
    assert worker.stats["succeeded"] == 1 and worker.stats["failed"] == 1
    assert worker.stats["acked"] == 1 and worker.stats["nacked"] == 1
    assert client.fetches[-1][0] == 3  # both finished: all slots free again


def test_nack_delay_option():
    def handler(j):
        raise ValueError("bad job")

    worker, client, clock = make(handler, nack_delay=1500)
    client.deliver(job(1))
    assert client.calls == [("nack", job(1).id, 1500)] and worker.stats["nacked"] == 1
    with pytest.raises(ValueError, match="nack_delay"):
        Worker(handler, ["q"], client=FakeClient(), reactor=task.Clock(), nack_delay=-1)


def test_fast_ack_option():
    worker, client, clock = make(lambda j: None, fast_ack=True)
    client.deliver(job(1))
    assert client.calls == [("fast_ack", job(1).id)]


def test_concurrency_is_bounded_and_slots_are_refilled():
    running = {}

    def handler(j):
        running[j.id] = defer.Deferred()
        return running[j.id]

    worker, client, clock = make(handler, concurrency=2)
    client.deliver(job(1))
    assert worker.running_jobs == 1 and client.fetches[-1][0] == 1  # asks for the one free slot
    client.deliver(job(2))
    assert worker.running_jobs == 2 and len(client.fetches) == 2    # full: no GETJOB in flight
    running[job(1).id].callback(None)
    assert client.calls == [("ack", job(1).id)]
    assert len(client.fetches) == 3 and client.fetches[-1][0] == 1  # the freed slot is refilled
    running[job(2).id].errback(RuntimeError("late failure"))
    assert ("nack", job(2).id) in client.calls


def test_working_heartbeats_follow_the_jobs_retry():
    done = defer.Deferred()
    worker, client, clock = make(lambda j: done, first_heartbeat=0.5, heartbeat_fraction=0.5)
    client.working_reply = 4
    client.deliver(job(1))
    clock.advance(0.49)
    assert ("working", job(1).id) not in client.calls
    clock.advance(0.01)
    assert client.calls.count(("working", job(1).id)) == 1
    clock.advance(1.99)  # next one at RETRY (4 s) * 0.5
    assert client.calls.count(("working", job(1).id)) == 1
    clock.advance(0.01)
    assert client.calls.count(("working", job(1).id)) == 2 and worker.stats["heartbeats"] == 2
    done.callback(None)
    clock.advance(60)
    assert client.calls.count(("working", job(1).id)) == 2  # none after the job finished
    assert client.calls[-1] == ("ack", job(1).id) and not clock.getDelayedCalls()


def test_fast_jobs_cost_no_working():
    worker, client, clock = make(lambda j: task.deferLater(clock, 0.4, lambda: None))
    client.deliver(job(1))
    clock.advance(0.4)
    clock.advance(10)
    assert client.calls == [("ack", job(1).id)]


@pytest.mark.parametrize("reply, error", [(0, None), (None, errors.NoJob("NOJOB x")),
                                          (None, errors.TooLate("TOOLATE y"))])
def test_heartbeats_stop_when_working_says_so(reply, error):
    done = defer.Deferred()
    worker, client, clock = make(lambda j: done)
    client.working_reply, client.working_error = reply, error
    client.deliver(job(1))
    clock.advance(100)
    assert client.calls.count(("working", job(1).id)) == 1
    done.callback(None)


def test_heartbeat_retried_after_a_connection_error():
    done = defer.Deferred()
    worker, client, clock = make(lambda j: done, first_heartbeat=0.5)
    client.working_error = errors.ConnectionError("lost")
    client.deliver(job(1))
    clock.advance(0.5)
    clock.advance(0.5)
    assert client.calls.count(("working", job(1).id)) == 2
    done.callback(None)


def test_coroutine_handler():
    seen = []

    async def handler(j):
        await task.deferLater(clock, 1.0, lambda: None)
        seen.append(j.id)

    worker, client, clock = make(handler)
    client.deliver(job(1))
    assert client.calls == [] or client.calls[0][0] == "working"
    clock.advance(1.0)
    assert seen == [job(1).id] and client.calls[-1] == ("ack", job(1).id)


def test_getjob_failure_is_retried_after_a_pause():
    worker, client, clock = make(lambda j: None)
    client.fetches[-1][1].errback(errors.NoNodeAvailable("no node"))
    assert len(client.fetches) == 1
    clock.advance(FETCH_RETRY_S)
    assert len(client.fetches) == 2


def test_a_refused_getjob_is_logged_as_an_error_and_retried():
    worker, client, clock = make(lambda j: None)
    client.username = "alice"
    with capturedLogs() as events:
        client.fetches[-1][1].errback(errors.NoPermission("NOPERM No permissions to access a queue"))
    [event] = events
    assert event["log_level"] == LogLevel.error and "refused to user alice" in formatEvent(event)
    assert event["queues"] == "q" and worker.stats["fetch_errors"] == 1
    clock.advance(FETCH_RETRY_S)  # the user's ACL may change while the worker runs: tried again
    assert len(client.fetches) == 2
    with capturedLogs() as events:
        client.fetches[-1][1].errback(errors.NoNodeAvailable("no node"))
    assert [e["log_level"] for e in events] == [LogLevel.warn] and worker.stats["fetch_errors"] == 2


def test_graceful_stop_waits_for_running_jobs_and_fetches_no_more():
    running = defer.Deferred()
    worker, client, clock = make(lambda j: running if j.body == b"body1" else None, concurrency=4)
    client.deliver(job(1))
    stopped = worker.stopService()
    assertNoResult(stopped)
    client.deliver(job(2))  # the GETJOB in flight at the stop: its job still runs
    assert ("ack", job(2).id) in client.calls
    n = len(client.fetches)
    assertNoResult(stopped)
    running.callback(None)
    assert stopped.called and len(client.fetches) == n  # no GETJOB after the stop
    assert client.calls[-1] == ("ack", job(1).id)


def test_stop_timeout_leaves_a_stuck_job_to_the_cluster():
    worker, client, clock = make(lambda j: defer.Deferred(), stop_timeout=5.0)
    client.deliver(job(1))
    stopped = worker.stopService()  # the full worker has no GETJOB in flight
    clock.advance(4.9)
    assertNoResult(stopped)
    clock.advance(0.1)
    assert stopped.called and ("ack", job(1).id) not in client.calls


def test_own_client_is_disconnected_on_stop():
    clock = task.Clock()
    worker = Worker(lambda j: None, ["q"], nodes=["127.0.0.1:1"], reactor=clock)
    client = FakeClient()
    worker.client = client
    worker.startService()
    d = worker.stopService()
    client.deliver()
    assert d.called and client.disconnected


def test_arguments_are_checked():
    for kw in ({"concurrency": 0}, {"fetch_timeout": 0}, {"heartbeat_fraction": 0}):
        with pytest.raises(ValueError):
            Worker(lambda j: None, ["q"], client=FakeClient(), reactor=task.Clock(), **kw)
    with pytest.raises(ValueError):
        Worker(lambda j: None, [], client=FakeClient(), reactor=task.Clock())


# -- twistd disque-worker ----------------------------------------------------------

def test_tap_options_and_handler_loading(tmp_path, monkeypatch):
    (tmp_path / "wjobs.py").write_text("def handle(job):\n    return job\nclass K:\n    m = staticmethod(handle)\nx = 3\n")
    monkeypatch.chdir(tmp_path)
    options = Options()
    options.parseOptions(["--handler", "wjobs:K.m", "--queues", "a,b", "--nodes", "h1:1,h2:2", "-c", "4",
                          "--nack-delay", "250"])
    assert options["nack-delay"] == 250
    assert options["handler"](7) == 7 and options["queues"] == ["a", "b"]
    assert options["nodes"] == ["h1:1", "h2:2"] and options["concurrency"] == 4
    for argv, message in (
            (["--queues", "a"], "--handler is required"),
            (["--handler", "wjobs:handle"], "--queues is required"),
            (["--handler", "wjobs", "--queues", "a"], "must look like package.module:function"),
            (["--handler", "nosuchmodule_xyz:f", "--queues", "a"], "cannot import nosuchmodule_xyz"),
            (["--handler", "wjobs:nothere", "--queues", "a"], "has no 'nothere'"),
            (["--handler", "wjobs:x", "--queues", "a"], "is not callable"),
            (["--handler", "wjobs:handle", "--queues", "a", "--tls-cert-file", "c"], "go together")):
        with pytest.raises(SystemExit) as e:
            Options().parseOptions(argv)
        assert message in str(e.value) and str(e.value).startswith("disque-worker: ")
    with pytest.raises(Exception):
        Options().parseOptions(["--handler", "wjobs:handle", "--queues", "a", "-c", "0"])
    assert load_handler("wjobs:handle")(1) == 1


def test_tap_username_and_password_reach_the_client(tmp_path, monkeypatch):
    (tmp_path / "wjobs2.py").write_text("def handle(job):\n    return job\n")
    monkeypatch.chdir(tmp_path)
    for argv, login in ((["--username", "alice", "--password", "alicepw"], ("alice", "alicepw")),
                        (["--password", "pw"], (None, "pw")),
                        ([], (None, None))):
        options = Options()
        options.parseOptions(["--handler", "wjobs2:handle", "--queues", "a:q"] + argv)
        client = makeService(options).client
        assert (client.username, client.password) == login
    # from the environment, where ps does not show them; the options win
    monkeypatch.setenv("DISQUE_USERNAME", "bob")
    monkeypatch.setenv("DISQUE_PASSWORD", "bobpw")
    for argv, login in (([], ("bob", "bobpw")), (["--password", "pw"], ("bob", "pw"))):
        options = Options()
        options.parseOptions(["--handler", "wjobs2:handle", "--queues", "a:q"] + argv)
        client = makeService(options).client
        assert (client.username, client.password) == login


def test_tap_loglevel_filters_the_worker_and_client_lines(tmp_path, monkeypatch):
    """twistd disque-worker writes notice and above unless told otherwise:
    no debug line of the worker or of its client, whose lines go through
    the process's disque log (disque.io.logs.node_log)."""
    from disque.io.logs import node_log

    (tmp_path / "wjobs3.py").write_text("def handle(job):\n    return job\n")
    monkeypatch.chdir(tmp_path)
    argv = ["--handler", "wjobs3:handle", "--queues", "q"]
    try:
        for more, written in (([], ["a client info line"]),
                              (["--loglevel", "verbose"], ["a worker debug line", "a client debug line",
                                                           "a client info line"]),
                              (["--loglevel", "warning"], [])):
            options = Options()
            options.parseOptions(argv + more)
            worker = makeService(options)
            with capturedLogs() as events:
                worker.log.debug("a worker debug line")
                worker.client.log.debug("a client debug line")
                worker.client.log.info("a client info line")
            assert [formatEvent(e) for e in events] == written, more
    finally:
        node_log.reset()
    with pytest.raises(SystemExit) as e:
        Options().parseOptions(argv + ["--loglevel", "loud"])
    assert str(e.value) == "disque-worker: --loglevel must be one of debug, verbose, notice, warning"


def test_the_client_names_a_node_in_its_lines_without_a_repr():
    from disque.client.txconn import Node

    node = Node("127.0.0.1", 7711)
    assert "{node}".format(node=node) == "127.0.0.1:7711"
    node.id = "3f2a9c1b5e" + "0" * 30
    assert "{node}".format(node=node) == "127.0.0.1:7711 (3f2a9c1b)"
    assert repr(node) == "<node 127.0.0.1:7711 3f2a9c1b>"          # (what a debugger shows)


def test_stop_gives_up_a_getjob_stuck_in_failover():
    worker, client, clock = make(lambda j: None, fetch_timeout=1000)
    stopped = worker.stopService()  # the GETJOB in flight never answers: its node is gone
    clock.advance(1.99)
    assertNoResult(stopped)
    clock.advance(0.01)
    assert stopped.called and client.fetches[-1][1].called and len(client.fetches) == 1


def test_stop_in_order_stops_the_last_child_first_and_waits_for_it():
    from twisted.application import service

    from disque.worker.service import StopInOrder

    events = []

    class Child(service.Service):
        def __init__(self, name, d):
            self.name, self.d = name, d

        def stopService(self):
            events.append("stop " + self.name)
            return self.d

    node_stopped, worker_stopped = defer.succeed(None), defer.Deferred()
    parent = StopInOrder()
    Child("node", node_stopped).setServiceParent(parent)
    Child("worker", worker_stopped).setServiceParent(parent)
    parent.startService()
    d = parent.stopService()
    assert events == ["stop worker"]  # the node keeps serving while the worker finishes
    worker_stopped.callback(None)
    assert events == ["stop worker", "stop node"] and d.called
