"""The clients against real nodes: every command and error, AUTH and TLS,
two tenants (users with their own queues) on one node, discovery from one
node, failover when the current node is killed, -LEAVING, and the consumer
rule seen from job origins.

Each test runs on both clients: the Twisted one (driven from the reactor
thread of txsupport.py) and the blocking one, through the same calls."""

import time

import pytest

from disque.client import DisqueClient, TLSOptions, errors
from tests.support.process import NodeProcess, call, free_port, start_tenants, wait_for
from tests.support.tx import KINDS, Sync, make_client, reactor


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    node = NodeProcess(tmp_path_factory.mktemp("client-single")).start()
    yield node
    node.stop()


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def one(kind, single):
    c = make_client(kind, [single])
    yield c
    c.close()


def test_every_command(one, kind):
    q = "every-" + kind
    job_id = one.add_job(q, b"\x00binary body\r\n", timeout=1000, retry=30, ttl=600)
    assert job_id.startswith("D-") and one.node_id.startswith(job_id[2:10])
    assert one.qlen(q) == 1
    stat = one.qstat(q)
    assert stat["name"] == q and stat["len"] == 1 and stat["pause"] == "none"
    assert [j.id for j in one.qpeek(q, 5)] == [job_id]
    [job] = one.get_jobs(q, timeout=1000)
    assert (job.queue, job.id, job.body, job.nacks, job.additional_deliveries) == \
        (q, job_id, b"\x00binary body\r\n", 0, 0)
    assert job.node == one.node_id
    shown = one.show(job)
    assert shown["state"] == "active" and shown["retry"] == 30 and shown["body"] == job.body
    assert one.working(job) == 30
    assert one.nack(job) == 1
    job = one.get_job(q, timeout=1000)
    assert job.nacks == 1
    assert one.enqueue(job) == 1
    job = one.get_job(q, timeout=1000)
    assert job.additional_deliveries == 1
    assert one.enqueue(job) == 1 and one.dequeue(job) == 1 and one.qlen(q) == 0
    assert one.ack(job) == 1
    assert one.get_jobs(q, nohang=True) == [] and one.get_job(q, timeout=10) is None

    other = one.add_job(q, "text body")
    assert one.show(other)["body"] == b"text body"
    assert one.del_job(other) == 1 and one.show(other) is None
    third = one.add_job(q, "x")
    assert one.fast_ack(third) == 1

    assert one.pause(q, "in") == "in"
    with pytest.raises(errors.Paused):
        one.add_job(q, "refused")
    assert one.pause(q, "state") == "in" and one.pause(q, "none") == "none"

    names = ["scan-%s-%d" % (kind, i) for i in range(25)]
    ids = [one.add_job(name, "s") for name in names]
    assert set(names) <= set(one.qscan(count=3))  # pages of one cursor, all from one node
    assert set(ids) <= set(one.jscan(count=4, states=["queued"]))
    full = [j for j in one.jscan(queues=[names[0]], reply="all")]
    assert [(j["id"], j["queue"], j["body"]) for j in full] == [(ids[0], names[0], b"s")]

    hello = one.hello()
    assert hello.node_id == one.node_id and len(hello.nodes) == 1
    assert one.info("server")["tcp_port"] == str(one.node_address[1])
    assert one.ping() == "PONG"
    seconds, micros = one.time()
    assert abs(seconds - time.time()) < 5 and 0 <= micros < 10 ** 6
    assert one.config_set("hz", 12) == "OK" and one.config_get("hz") == {"hz": "12"}
    assert one.config_set("hz", 10) == "OK"
    with pytest.raises(errors.ResponseError):
        one.config_set("hz", "not-a-number")
    assert one.cluster_info()["cluster_known_nodes"] == "1"
    assert one.node_id in one.cluster_nodes() and "myself" in one.cluster_nodes()
    assert "rewriting" in one.bgrewriteaof().lower()
    assert one.execute("QLEN", names[1]) == 1


def test_errors(one, kind):
    q = "errors-" + kind
    with pytest.raises(errors.NoJob):
        one.working("D-00000000-aaaaaaaaaaaaaaaaaaaaaaaa-0001")
    with pytest.raises(errors.BadId):
        one.show("D-not-an-id")
    with pytest.raises(errors.NoReplication, match="NOREPL"):
        one.add_job(q, "x", replicate=3)
    one.add_job(q, "first")
    with pytest.raises(errors.MaxLen):
        one.add_job(q, "second", maxlen=1)
    with pytest.raises(errors.ResponseError, match="wrong number of arguments") as e:
        one.execute("QLEN")
    assert type(e.value) is errors.ResponseError and e.value.code == "ERR"
    # The connection stays usable after every refusal.
    assert one.qlen(q) == 1


def test_extensions_priority_backoff_nack_delay_dead_letters(one, kind):
    """The keyword arguments of issue 17's extensions, on a real node."""
    q = "ext-" + kind
    low = one.add_job(q, b"low", priority=1)
    high = one.add_job(q, b"high", priority=9)
    mid = one.add_job(q, b"mid")
    assert [j.id for j in one.qpeek(q, 3)] == [high, mid, low]  # highest first
    assert one.show(high)["priority"] == 9 and "priority" not in one.show(mid)
    one.ack(low, high, mid)

    # NACK with a delay: out of the queue until then, counting a NACK.
    job_id = one.add_job(q, b"later", retry=60)
    [job] = one.get_jobs(q, nohang=True)
    t0 = time.monotonic()
    assert one.nack(job, delay=700) == 1
    assert one.qlen(q) == 0 and isinstance(one.show(job)["redeliver-at"], int)
    wait_for(lambda: one.qlen(q) == 1, 5, what="the job back after its NACK delay")
    assert time.monotonic() - t0 >= 0.6
    [job] = one.get_jobs(q, nohang=True)
    assert job.id == job_id and job.nacks == 1
    one.ack(job)

    # BACKOFF: what a NACK without DELAY waits (EXP: doubled per NACK, less
    # up to 20% jitter, capped).
    job_id = one.add_job(q, b"backoff", retry=60, backoff=(400, 800))
    assert one.show(job_id)["backoff"] == [400, 800]
    for nth, (low_s, high_s) in enumerate(((0.3, 3.0), (0.6, 3.0), (0.6, 3.0))):
        [job] = one.get_jobs(q, nohang=True)
        assert job.id == job_id and job.nacks == nth
        t0 = time.monotonic()
        one.nack(job)
        assert one.qlen(q) == 0
        wait_for(lambda: one.qlen(q) == 1, high_s, interval=0.01, what="the job back after its backoff")
        assert time.monotonic() - t0 >= low_s
    one.ack(job_id)
    fixed = one.add_job(q, b"fixed", backoff=500)
    assert one.show(fixed)["backoff"] == [500, 500]
    one.ack(fixed)

    # MAXDELIVERIES: the third delivery goes to the dead-letter queue.
    dlq = q + "-dead"
    job_id = one.add_job(q, b"poison", retry=60, max_deliveries=2, deadletter=dlq)
    shown = one.show(job_id)
    assert shown["max-deliveries"] == 2 and shown["dead-letter"] == dlq
    for _ in range(2):
        [job] = one.get_jobs(q, nohang=True)
        assert job.id == job_id
        one.nack(job)
    assert one.qlen(q) == 0 and one.get_jobs(q, nohang=True) == []
    [dead] = one.get_jobs(dlq, nohang=True)
    assert dead.body == b"poison" and dead.id != job_id
    dead_shown = one.show(dead)
    assert dead_shown["dead-from"] == q and dead_shown["dead-reason"] == "max-deliveries"
    [revived, none] = one.revive(dead, job_id)  # back in q as a new job; the original is no dead letter
    assert none is None and revived not in (job_id, dead.id) and one.qlen(q) == 1 and one.qlen(dlq) == 0
    assert one.show(revived)["nacks"] == 0 and one.show(revived)["max-deliveries"] == 2
    one.ack(revived)
    assert one.qstat(q)["dead"] == 1
    one.ack(dead)
    # The default dead-letter queue is <queue>:dead.
    job_id = one.add_job(q, b"poison2", max_deliveries=1)
    one.nack(one.get_jobs(q, nohang=True)[0])
    assert [j.body for j in one.qpeek(q + ":dead", 5)] == [b"poison2"]
    # Values out of range never reach the node.
    with pytest.raises(ValueError):
        one.add_job(q, b"x", priority=10)
    with pytest.raises(ValueError):
        one.nack(job_id, delay=-5)


def test_queue_limits(one, kind):
    """QLIMIT through the client: set, shown as Python values (rates as
    float), held deliveries in QSTAT, removed."""
    q = "limited-" + kind
    assert one.qlimit(q) == {}
    assert one.set_qlimit(q, rate=2.5, concurrency=1) is True
    assert one.qlimit(q) == {"rate": 2.5, "burst": 2, "concurrency": 1, "rate-here": 2.5, "concurrency-here": 1,
                             "in-flight": 0, "held": 0}
    for _ in range(2):
        one.add_job(q, b"x")
    [job] = one.get_jobs(q, count=2, nohang=True)  # CONCURRENCY 1
    stat = one.qstat(q)
    assert (stat["in-flight"], stat["held"], stat["rate"]) == (1, 1, "2.5")
    one.ack(job)
    assert one.clear_qlimit(q) is True and one.qlimit(q) == {}
    assert len(one.get_jobs(q, count=2, nohang=True)) == 1


def test_auth(kind, tmp_path):
    node = NodeProcess(tmp_path / "n", args=["--requirepass", "s3cret"]).start()
    try:
        good = make_client(kind, [node], password="s3cret")
        assert good.qlen("a") == 0
        good.close()
        for password in ("wrong", None):
            bad = make_client(kind, [node], password=password, failover_timeout=30)
            started = time.monotonic()
            with pytest.raises(errors.AuthError):
                bad.qlen("a")
            assert time.monotonic() - started < 5  # refused, not retried for failover_timeout
            bad.close()
    finally:
        node.stop()


@pytest.fixture(scope="module")
def tenants(tmp_path_factory):
    node = start_tenants(tmp_path_factory.mktemp("client-tenants"))
    yield node
    node.stop()


def test_tenants_keep_to_their_own_queues_and_jobs(kind, tenants):
    alice = make_client(kind, [tenants], username="alice", password="alicepw")
    bob = make_client(kind, [tenants], username="bob", password="bobpw")
    qa, qb = "a:" + kind, "b:" + kind
    try:
        done = alice.add_job(qa, b"alice's", retry=60)
        kept = alice.add_job(qa, b"alice's too", retry=60)
        theirs = bob.add_job(qb, b"bob's", retry=60)
        job = alice.get_job(qa, nohang=True)
        assert job.id == done and alice.working(job) == 60 and alice.ack(job) == 1
        started = time.monotonic()
        for refused in (lambda: alice.add_job(qb, b"x"), lambda: alice.get_jobs(qb, nohang=True),
                        lambda: alice.qlen(qb), lambda: alice.qpeek(qb, 1), lambda: alice.qstat(qb),
                        lambda: alice.pause(qb, "all"), lambda: alice.show(theirs), lambda: alice.ack(theirs),
                        lambda: alice.fast_ack(theirs), lambda: alice.nack(theirs),
                        lambda: alice.working(theirs), lambda: alice.enqueue(theirs),
                        lambda: alice.dequeue(theirs), lambda: alice.del_job(theirs),
                        lambda: list(alice.jscan(queues=[qb]))):
            with pytest.raises(errors.NoPermission, match="^NOPERM No permissions to access a (queue|job)$"):
                refused()
        assert time.monotonic() - started < 5  # each refused at once: no failover, no retry
        assert alice.qlen(qa) == 1  # the client is still on its node, logged in as alice
        # Her scans list her queues and jobs only.
        assert qa in alice.qscan() and not [q for q in alice.qscan() if not q.startswith("a:")]
        jobs = {j["id"]: j["queue"] for j in alice.jscan(reply="all")}
        assert kept in jobs and theirs not in jobs and all(q.startswith("a:") for q in jobs.values())
        # Bob's job is untouched: still queued, and his to take.
        assert bob.show(theirs)["state"] == "queued" and bob.qlen(qb) == 1
        job = bob.get_job(qb, nohang=True)
        assert job.id == theirs and bob.ack(job) == 1
        with pytest.raises(errors.NoPermission):
            bob.show(kept)
    finally:
        alice.close()
        bob.close()


def test_a_refused_username_password_pair(kind, tenants):
    for username, password in (("alice", "bobpw"), ("carol", "alicepw")):
        c = make_client(kind, [tenants], username=username, password=password, failover_timeout=30)
        started = time.monotonic()
        with pytest.raises(errors.AuthError, match="WRONGPASS"):
            c.qlen("a:q")
        assert time.monotonic() - started < 5  # refused, not retried for failover_timeout
        c.close()


def test_tls(kind, tmp_path):
    from tests.support.tls import make_pki, node_directives

    pki = make_pki(tmp_path / "pki")
    tls_port = free_port()
    directives = node_directives(pki, **{"tls-port": tls_port})
    args = ["--port", "0"] + [a for k, v in directives.items() for a in ("--set", "%s=%s" % (k, v))]
    node = NodeProcess(tmp_path / "n", port=tls_port, args=args)
    node.start(wait=False)
    try:
        c = make_client(kind, [tls_port], tls=TLSOptions(pki.ca, pki.client, pki.client_key))
        wait_for(lambda: _answers(c), timeout=15, what="the TLS node answers")
        job_id = c.add_job("tls-q", b"over tls")
        assert c.get_job("tls-q", timeout=1000).id == job_id
        c.close()
        stranger = make_client(kind, [tls_port], tls=TLSOptions(pki.ca), failover_timeout=1)
        with pytest.raises(errors.ConnectionError):  # no client certificate: no connection
            stranger.qlen("tls-q")
        stranger.close()
    finally:
        node.stop()


def _answers(c):
    try:
        return c.ping() == "PONG"
    except errors.DisqueError:
        return False


def test_no_node_available(kind):
    port = free_port()  # nothing listens there
    c = make_client(kind, [port], failover_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(errors.NoNodeAvailable, match="127.0.0.1:%d" % port):
        c.qlen("q")
    assert 0.9 <= time.monotonic() - started < 5
    c.close()


# -- clusters ----------------------------------------------------------------------

def _node_ids(nodes):
    return [call(n, "HELLO")[1].decode() for n in nodes]


def test_discovery_from_one_node(kind, trio, tmp_path):
    c = make_client(kind, [trio[1]])
    assert c.qlen("d") == 0
    ids = _node_ids(trio)
    assert c.node_id == ids[1]
    assert sorted(c.topology.nodes) == sorted(ids)
    assert {(n.host, n.port) for n in c.topology.nodes.values()} == {("127.0.0.1", n.port) for n in trio}
    extra = NodeProcess(tmp_path / "extra").start()
    try:
        assert c.cluster_meet("127.0.0.1", extra.port) == "OK"
        wait_for(lambda: len(c.hello().nodes) == 4, timeout=15, what="the new node joins")
    finally:
        extra.kill()
    c.close()
    fixed = make_client(kind, [trio[2]], discover=False)
    fixed.qlen("d")
    assert fixed.topology.nodes == {} and fixed.node_id == ids[2]
    fixed.close()


def test_failover_when_the_current_node_is_killed(kind, trio):
    c = make_client(kind, trio, switch_window=None)
    added = [c.add_job("fo", "job%d" % i, replicate=3, retry=1) for i in range(20)]
    victim = next(n for n, i in zip(trio, _node_ids(trio)) if i == c.node_id)
    victim.kill()
    # The client moves on by itself: an add and then every job, from the copies.
    added.append(c.add_job("fo", "after the kill", replicate=2, retry=1))
    assert c.node_id != _node_ids([victim])[0] if False else c.node_address[1] != victim.port
    got = set()
    deadline = time.monotonic() + 30
    while set(added) - got and time.monotonic() < deadline:
        for job in c.get_jobs("fo", count=10, timeout=500):
            got.add(job.id)
            c.ack(job)
    assert set(added) <= got
    c.close()


def test_leaving_node_sends_the_client_elsewhere(kind, pair):
    a, b = pair
    id_a, id_b = _node_ids(pair)
    c = make_client(kind, [a])
    assert c.qlen("lv") == 0 and c.node_id == id_a
    job_id = call(b, "ADDJOB", "lv", "on b", "0")
    assert call(a, "CLUSTER", "LEAVING", "yes") == b"OK"
    # GETJOB on the leaving node answers -LEAVING; the client runs it on B.
    job = c.get_job("lv", timeout=2000)
    assert c.node_id == id_b and job is not None and job.node == id_b
    assert job.id == job_id.decode() and c.topology.priority(id_a) >= 100
    c.close()
    # A producer on A: ADDJOB REPLICATE 2 gets -NOREPL because A leaves (it
    # cannot count itself); the client runs it on B, where the honest answer
    # is that two copies are impossible while A leaves.  It stays on B.
    p = make_client(kind, [a])
    with pytest.raises(errors.NoReplication) as e:
        p.add_job("lv", "two copies", replicate=2)
    assert not errors.means_leaving(e.value) and p.node_id == id_b
    assert p.add_job("lv", "one copy", replicate=1).startswith("D-" + id_b[:8])
    p.close()


def test_blocked_getjob_moves_when_its_node_starts_leaving(pair):
    a, b = pair
    id_a, id_b = _node_ids(pair)
    client = DisqueClient([("127.0.0.1", a.port)], reactor=reactor())
    c = Sync(client)
    assert c.qlen("lv2") == 0 and c.node_id == id_a
    from tests.support.tx import run
    import threading

    result = {}

    def consume():
        result["job"] = run(client.get_job, "lv2", timeout=8000)

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.5)  # GETJOB is now blocked on A
    call(a, "CLUSTER", "LEAVING", "yes")  # A unblocks it with -LEAVING
    wait_for(lambda: c.node_id == id_b, timeout=5, what="the client moves to B")
    job_id = call(b, "ADDJOB", "lv2", "for the moved consumer", "0", "REPLICATE", "1")
    t.join(15)
    assert result["job"].id == job_id.decode() and result["job"].node == id_b
    c.close()


def test_hello_refresh_leaves_a_node_that_starts_leaving(kind, pair):
    a, b = pair
    id_a, id_b = _node_ids(pair)
    c = make_client(kind, [a], hello_interval=0.2)
    assert c.qlen("r") == 0 and c.node_id == id_a
    assert c.cluster_leaving() == "OK"  # sent to the current node, A
    # QLEN is answered on a leaving node: HELLO's priority is what moves the client.
    wait_for(lambda: (c.qlen("r"), c.node_id == id_b)[1], timeout=10, interval=0.1,
             what="HELLO shows A leaving and the client moves to B")
    c.close()


def test_consumer_moves_to_the_producing_node(kind, pair):
    a, b = pair
    id_a, id_b = _node_ids(pair)
    producer = make_client(kind, [a], discover=False)
    consumer = make_client(kind, [b], switch_window=10)
    assert consumer.qlen("sw") == 0 and consumer.node_id == id_b
    origins_before, nodes_after = [], []
    for i in range(60):
        producer.add_job("sw", "job%d" % i)
    deadline = time.monotonic() + 30
    while len(origins_before) + len(nodes_after) < 60 and time.monotonic() < deadline:
        for job in consumer.get_jobs("sw", count=5, timeout=500):
            assert job.origin == id_a[:8]  # every job was produced on A
            (origins_before if consumer.switches == 0 or job.node == id_b else nodes_after).append(job.node)
            consumer.ack(job)
    assert consumer.switches == 1 and consumer.node_id == id_a
    assert id_b in origins_before  # first delivered by B (federation brought them)
    assert nodes_after and set(nodes_after) == {id_a}  # then fetched from A directly
    producer.close()
    consumer.close()


def test_paused_node_is_left_after_reply_timeout(kind, trio):
    import signal

    c = make_client(kind, trio, reply_timeout=1.0, switch_window=None)
    added = [c.add_job("pz", "job%d" % i, replicate=3, retry=1) for i in range(10)]
    victim = next(n for n in trio if ("127.0.0.1", n.port) == c.node_address)
    victim.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        added.append(c.add_job("pz", "after the pause", replicate=2, retry=1))
        assert time.monotonic() - started < 8 and c.node_address != ("127.0.0.1", victim.port)
        got = set()
        deadline = time.monotonic() + 30
        while set(added) - got and time.monotonic() < deadline:
            for job in c.get_jobs("pz", count=10, timeout=300):
                got.add(job.id)
                c.ack(job)
        assert set(added) <= got
    finally:
        victim.proc.send_signal(signal.SIGCONT)
    c.close()
