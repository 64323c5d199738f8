"""The heap policy (disque.node.heap): the node leaves no cyclic garbage behind,
which is what makes freezing survivors safe, and frozen jobs are out of
reach of full collections."""

import gc

import pytest
from twisted.internet import task
from twisted.python.failure import Failure
from twisted.internet.error import ConnectionDone

from disque.node.heap import freeze_survivors, heap_freezer
from tests.support.memory import cmd, connect, make_runtime, take


@pytest.fixture
def clean_gc():
    gc.unfreeze()  # what an earlier test of this process froze (a node service's freezer)
    gc.collect()
    was_enabled = gc.isenabled()
    yield
    gc.set_debug(0)
    gc.garbage.clear()
    gc.unfreeze()
    if was_enabled:
        gc.enable()
    gc.collect()


NODE_LIFETIME = {"BucketedDict", "JobTable", "ClusterNode", "ClusterView", "Config", "Context", "JobIdGenerator",
                 "LatencyMonitor", "NoPersistence", "NodeRuntime", "NodeState", "Schedule", "SlowLog", "Stats", "DedupIndex",
                 # the node's parts (disque.core.node), each pointing back at it
                 "Jobs", "Queues", "Memory", "Federation", "AddJob", "GetJob", "Requeue", "Acks", "DeadLetters",
                 "Settings", "Catalog", "Recurring", "QueueLimits",
                 "Latency", "Histogram",  # the node's latency histograms (three, made with it)
                 "FailedAuth", "Throttle", "Nonces",  # the runtime's authentication records
                 "LogLimit",  # and the one of its notices
                 "Seeds",  # the cluster view's seeds (disque.core.seeds)
                 "Census",  # the cluster view's counts (disque.node.census), pointing back at the runtime
                 "ClientMemory",  # maxmemory-clients' running total
                 "Acl", "User",  # the node's users (made with it, and by ACL SETUSER: not per client)
                 # the runtime's parts (disque.node), each pointing back at it
                 "BusHub", "Effects", "NodeFile", "ProcessFacts",
                 "run_of_commands"}  # the runtime's one, pointing at the context


def _workload(runtime, clock):
    """Every kind of long-lived object the node makes, then let go of all:
    clients (some blocked, some killed), jobs in every state, queues that
    are reclaimed, paused queues, scans."""
    conns = [connect(runtime) for _ in range(4)]
    (p1, t1), (p2, t2), (p3, t3), (p4, t4) = conns
    p1.dataReceived(cmd("CLIENT", "SETNAME", "producer"))
    ids = []
    for i in range(50):
        p1.dataReceived(cmd("ADDJOB", "q%d" % (i % 5), "body%d" % i, "0", "RETRY", "1"))
        ids.append(take(t1).split(b"\r\n")[-2].lstrip(b"+"))
    p1.dataReceived(cmd("ADDJOB", "qd", "later", "0", "DELAY", "5"))
    for key in ("k1", "k2", "k1"):  # keyed jobs, one repeated; one acked (its key remembered)
        p1.dataReceived(cmd("ADDJOB", "qk", "keyed", "0", "DEDUP", key))
        ids.append(take(t1).split(b"\r\n")[-2].lstrip(b"+"))
    p1.dataReceived(cmd("ACKJOB", ids[-1]))
    p2.dataReceived(cmd("GETJOB", "TIMEOUT", "100", "FROM", "empty"))  # parks, times out
    p3.dataReceived(cmd("GETJOB", "FROM", "nothing-yet"))  # parks until killed
    p4.dataReceived(cmd("GETJOB", "COUNT", "10", "FROM", "q0", "q1"))
    p4.dataReceived(cmd("ACKJOB", *ids[:10]))
    p4.dataReceived(cmd("NACK", *ids[10:15]) + cmd("WORKING", ids[20]) + cmd("FASTACK", ids[21]))
    p4.dataReceived(cmd("PAUSE", "q2", "in") + cmd("QSCAN", "0") + cmd("JSCAN", "0", "REPLY", "all"))
    clock.advance(2)  # requeues, the timed-out GETJOB
    runtime.tick()
    p1.dataReceived(cmd("PAUSE", "q2", "none"))
    p1.dataReceived(cmd("CLIENT", "KILL", "SKIPME", "yes", "ID", str(p3.client.id)))
    for proto, _ in conns:
        if proto.client is not None:
            proto.connectionLost(Failure(ConnectionDone()))
    clock.advance(2 * 86400)  # every job's TTL is over
    runtime.tick()
    clock.advance(400)  # the emptied queues are idle long enough to go
    runtime.tick()
    assert len(runtime.node.jobs) == 0 and len(runtime.node.queues) == 0


def test_the_node_leaves_no_cyclic_garbage(clean_gc):
    runtime, clock = make_runtime()
    gc.disable()
    _workload(runtime, clock)
    del runtime
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    ours = {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("disque")}
    # The node itself is one cycle (runtime <-> context), made once per node:
    # harmless.  Nothing made per client, job, queue or request may be.
    assert ours - NODE_LIFETIME == set()
    assert ours, "the runtime's own cycle should have been seen"


def test_the_check_above_can_see_a_cycle(clean_gc):
    """The same check finds a per-client cycle (a client that still points
    at its connection after the connection pointed at it)."""
    runtime, clock = make_runtime()
    proto, _ = connect(runtime)
    client = proto.client
    gc.disable()
    proto.connectionLost(Failure(ConnectionDone()))
    client.conn = proto
    proto.client = client  # the cycle connectionLost breaks, remade by hand
    del proto, client, runtime
    gc.set_debug(gc.DEBUG_SAVEALL)
    gc.collect()
    ours = {type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("disque")}
    assert {"ClientState", "RespProtocol"} <= ours - NODE_LIFETIME


def test_frozen_jobs_are_not_walked_by_collections(clean_gc):
    runtime, clock = make_runtime()
    proto, tr = connect(runtime)
    for i in range(20000):
        proto.dataReceived(cmd("ADDJOB", "q", "x" * 100, "0"))
    tr.clear()
    # Count this node's jobs only: a job an earlier test of this worker
    # still holds (a hypothesis example, a lingering runtime) is tracked too.
    ours = {id(job) for job in runtime.node.jobs.values()}
    assert len(ours) == 20000

    def tracked():
        return sum(1 for o in gc.get_objects() if id(o) in ours)

    assert tracked() == 20000
    freeze_survivors()
    assert tracked() == 0
    assert gc.get_freeze_count() >= 20000
    # Frozen objects still die by reference counting.
    proto.dataReceived(cmd("DEBUG", "FLUSHALL"))
    assert len(runtime.node.jobs) == 0


def test_freezer_service_runs_every_interval(clean_gc):
    clock = task.Clock()
    svc = heap_freezer(clock, 10)
    svc.startService()
    first = gc.get_freeze_count()
    assert first > 0
    keep = [[i] for i in range(1000)]  # new survivors
    clock.advance(10)
    assert gc.get_freeze_count() >= first + 1000
    svc.stopService()
    assert keep


def test_freezer_off_leaves_the_collector_alone(clean_gc):
    assert heap_freezer(task.Clock(), 0) is None
    assert gc.get_freeze_count() == 0


class _Cycle:
    pass


def _frozen_cycle():
    """A reference cycle, alive when frozen; returns a weak reference to it."""
    import weakref
    a, b = _Cycle(), _Cycle()
    a.other, b.other = b, a
    ref = weakref.ref(a)
    return ref, a


def test_a_released_frozen_cycle_is_collected_by_a_full_collection(clean_gc, monkeypatch):
    from disque.node import heap
    monkeypatch.setattr(heap._Released, "pending", False)
    monkeypatch.setattr(heap._Released, "next_full", float("-inf"))
    monkeypatch.setattr(heap, "FULL_COLLECTION_COST", 0)  # spacing: the minute alone
    clock = task.Clock()
    clock.advance(1000)
    svc = heap_freezer(clock, 1)
    svc.startService()
    try:
        ref, alive = _frozen_cycle()
        clock.advance(1)  # frozen while alive
        del alive
        clock.advance(1)
        assert ref() is not None  # young collections never see it again: the leak
        heap.frozen_cycles_released()
        clock.advance(1)
        assert ref() is None  # the full collection took it
        # the next release waits for the spacing
        ref, alive = _frozen_cycle()
        clock.advance(1)
        del alive
        heap.frozen_cycles_released()
        clock.advance(heap.FULL_COLLECTION_SPACING - 5)
        assert ref() is not None
        clock.advance(5)
        assert ref() is None
    finally:
        svc.stopService()


def released_by_the_links(service) -> list:
    """What the node's links report released, from now on: the node hands
    them the freezer's ``frozen_cycles_released``, swapped here for a list."""
    from disque.node import heap
    links = service.runtime.links
    assert links.cycle_released is heap.frozen_cycles_released
    released = []
    links.cycle_released = lambda: released.append(1)
    return released


def test_a_dropped_bus_link_asks_for_a_full_collection(tmp_path):
    """Each link dropped leaves a ClientService cycle (the freezer's case)."""
    from disque.testing import IOSimCluster
    cluster = IOSimCluster(1, tmp_path)
    try:
        released = released_by_the_links(cluster.services[0])
        cluster.client(0).call("CLUSTER", "MEET", "192.0.2.1", "7711")  # TEST-NET: never answers
        cluster.advance(40.0)  # the handshake expires, its link is dropped
        assert released
    finally:
        cluster.stop()


def test_a_cycle_that_died_old_is_not_frozen(clean_gc):
    """A cycle promoted to the old generation by young collections, dead
    before the freezer runs, is collected, not frozen."""
    ref, alive = _frozen_cycle()
    gc.collect(0)
    gc.collect(1)  # now in the oldest generation
    del alive
    freeze_survivors()
    assert ref() is None


def test_a_slow_full_collection_spaces_the_next_ones_more(clean_gc, monkeypatch):
    """A full collection that took 0.5 s (a million jobs) is not repeated
    within 1000 x 0.5 s: at most a thousandth of the node's time."""
    from disque.node import heap
    monkeypatch.setattr(heap._Released, "pending", True)
    monkeypatch.setattr(heap._Released, "next_full", float("-inf"))
    ticks = iter([10.0, 10.5])
    monkeypatch.setattr(heap.time, "perf_counter", lambda: next(ticks))
    freeze_survivors(1000.0)
    assert heap._Released.next_full == 1000.0 + 500.0 and not heap._Released.pending


def test_a_failed_link_attempt_asks_for_a_full_collection(tmp_path):
    from disque.testing import IOSimCluster
    cluster = IOSimCluster(2, tmp_path)
    try:
        released = released_by_the_links(cluster.services[0])
        cluster.client(0).call("CLUSTER", "MEET", "127.0.0.1", cluster.ports[1])
        cluster.advance(2.0)
        cluster.kill(1)
        before = len(released)
        cluster.advance(3.0)  # the link to the dead node retries and fails
        assert len(released) > before
    finally:
        cluster.stop()
