"""The extensions of issue 17 (docs/extensions.md) in real processes:
``NACK ... DELAY`` across a kill -9 of the NACKing node and across an AOF
restart, BACKOFF measured on a live node, dead letters on a three-node
cluster with kills and with several nodes deciding at once, and PRIORITY
through federation.

Times: the node's clock is the machine's (``reactor.seconds()``), so the
absolute ``redeliver-at`` of SHOW compares with ``time.time()`` here.
Every bound allows ``SLOP`` ms for the difference between the node's
notion of "now" (taken once per reactor turn) and ours.
"""

import signal
import time

from disque.core.deadletter import dead_letter_id

from tests.support.process import NodeProcess, call, redis_cli, show, start_cluster, wait_for

SLOP = 50  # ms
TIME_ERR = 500  # ms: the random spread of a requeue time (disque.core.jobs.TIME_ERR)
AOF = ("--appendonly", "yes", "--set", "appendfsync=always")
HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def now_ms():
    return int(time.time() * 1000)


def qlen(node, queue):
    return call(node, "QLEN", queue)


def qstat(node, queue):
    reply = call(node, "QSTAT", queue)
    return dict(zip(reply[::2], reply[1::2])) if reply else {}


def take(node, queue):
    """GETJOB NOHANG WITHCOUNTERS: the job as a dict, or None."""
    reply = call(node, "GETJOB", "NOHANG", "WITHCOUNTERS", "FROM", queue)
    if not reply:
        return None
    (job,) = reply
    return {"queue": job[0], "id": job[1], "body": job[2], "nacks": job[4], "deliv": job[6]}


def killed(nodes):
    for n in nodes:
        n.kill()


# -- NACK ... DELAY --------------------------------------------------------------------

def test_nack_delay_holds_on_the_other_copies_after_the_nacking_node_is_killed(tmp_path):
    """A NACKs with DELAY 4000 and dies at once.  B and C heard NACKDELAY:
    neither queues the job before the delay passed (their own requeue
    timers, set at ADDJOB, would fire about 1 s in, well inside it), and one of them
    does queue it RETRY after the delay: at least once survives the kill."""
    a, b, c = nodes = start_cluster(tmp_path, 3, hosts=HOSTS)
    try:
        job_id = call(a, "ADDJOB", "nd", "payload", "0", "REPLICATE", "3", "RETRY", "1")
        assert job_id.startswith(b"D-")
        assert all(show(n, job_id) is not None for n in nodes)
        got = take(a, "nd")
        assert got["id"] == job_id and got["nacks"] == 0
        before = now_ms()
        assert call(a, "NACK", job_id, "DELAY", "4000") == 1
        after = now_ms()
        on_a = show(a, job_id)
        until = on_a[b"redeliver-at"]
        assert before + 4000 - SLOP <= until <= after + 4000
        assert on_a[b"state"] == b"active" and on_a[b"nacks"] == 1 and qlen(a, "nd") == 0
        # The other copies count the NACK (NACKDELAY arrived), then A dies.
        wait_for(lambda: all(show(n, job_id)[b"nacks"] == 1 for n in (b, c)), what="NACKDELAY on B and C")
        a.kill()

        checks = 0
        while now_ms() < until - 300:
            for n in (b, c):
                assert qlen(n, "nd") == 0, "queued on %d before the delay passed" % n.port
                assert take(n, "nd") is None, "delivered on %d before the delay passed" % n.port
                s = show(n, job_id)
                assert s[b"state"] == b"active" and s[b"nacks"] == 1
                # It waits RETRY past the NACK's time (and no less).
                assert s[b"next-requeue-within"] >= until + 1000 - now_ms() - SLOP, s
                checks += 1
            time.sleep(0.1)
        assert checks >= 10  # the window was really watched

        delivered = []

        def delivered_once():
            for n in (b, c):
                job = take(n, "nd")
                if job is not None:
                    delivered.append((n, job, now_ms()))
            return delivered

        wait_for(delivered_once, timeout=(until + 1000 + TIME_ERR - now_ms()) / 1000 + 5, interval=0.05,
                 what="B or C to queue the job after delay + RETRY")
        (holder, job, at), = delivered
        assert job["id"] == job_id and job["body"] == b"payload"
        assert at >= until + 1000 - SLOP, "queued %d ms after the delay, before RETRY passed" % (at - until)
        assert job["nacks"] == 1  # counted once, when NACKed
        assert call(holder, "ACKJOB", job_id) == 1
        other = c if holder is b else b
        wait_for(lambda: (show(other, job_id) or {}).get(b"state", b"acked") == b"acked",
                 what="SETACK on the other copy")
        assert take(other, "nd") is None
    finally:
        killed(nodes)


def test_nack_delay_survives_an_aof_restart(tmp_path):
    """NACK DELAY on a node with an AOF, kill -9, restart: SHOW has the
    same redeliver-at, the job is not queued before it and is after it,
    and the NACK was counted once (the delayed requeue counts nothing)."""
    node = NodeProcess(tmp_path / "n", args=AOF).start()
    try:
        job_id = call(node, "ADDJOB", "aq", "survivor", "0", "RETRY", "1")
        assert take(node, "aq")["id"] == job_id
        # The delay outlasts a restart on a loaded machine (a PyPy node under
        # four test workers on two cores took over 4 s).
        rc, out = redis_cli(node.port, "NACK", job_id, "DELAY", "10000")
        assert rc == 0 and out.strip() == b"1", out
        until = show(node, job_id)[b"redeliver-at"]
        node.kill()
        node.start()
        assert now_ms() < until - 1000, "the restart took too long for this test (%d ms left)" % (until - now_ms())
        s = show(node, job_id)
        assert s is not None, "the job was lost"
        assert s[b"redeliver-at"] == until
        assert s[b"state"] == b"active" and s[b"nacks"] == 1 and s[b"additional-deliveries"] == 0

        while now_ms() < until - 200:
            assert qlen(node, "aq") == 0, "queued %d ms before its redeliver-at" % (until - now_ms())
            time.sleep(0.05)
        job = wait_for(lambda: take(node, "aq"), timeout=(until - now_ms()) / 1000 + 3, interval=0.02,
                       what="the requeue at redeliver-at")
        assert now_ms() >= until - SLOP
        assert job["id"] == job_id and job["body"] == b"survivor"
        assert (job["nacks"], job["deliv"]) == (1, 0), job
        s = show(node, job_id)
        assert (s[b"nacks"], s[b"additional-deliveries"]) == (1, 0)
        assert b"redeliver-at" not in s
    finally:
        node.kill()


# -- BACKOFF -------------------------------------------------------------------------------

def nack_and_measure(node, job_id):
    """NACK (no DELAY) -> the delay the node chose, bounded by the times
    just before and after the command: (low, high) in ms."""
    before = now_ms()
    assert call(node, "NACK", job_id) == 1
    after = now_ms()
    at = show(node, job_id)[b"redeliver-at"]
    return at, at - after, at - before


def test_backoff_exp_grows_within_its_band_and_is_capped(node):
    base, cap = 100, 600
    job_id = call(node, "ADDJOB", "bq", "b", "0", "RETRY", "30", "BACKOFF", "EXP", str(base), str(cap))
    s = show(node, job_id)
    assert s[b"backoff"] == [base, cap]
    gaps = []
    for i in range(1, 7):
        job = call(node, "GETJOB", "TIMEOUT", "5000", "WITHCOUNTERS", "FROM", "bq")
        assert job is not None and job[0][1] == job_id and job[0][4] == i - 1
        if gaps:
            assert now_ms() >= gaps[-1][0] - SLOP  # not served before its redeliver-at
        at, low, high = nack_and_measure(node, job_id)
        assert qlen(node, "bq") == 0
        assert show(node, job_id)[b"nacks"] == i
        expected = min(cap, base << (i - 1))
        assert expected * 0.8 - SLOP <= high and low <= expected, (i, expected, low, high)
        gaps.append((at, low, high))
    # The bands of 100, 200, 400 and 600 ms do not overlap: strictly growing.
    lows = [g[1] for g in gaps]
    highs = [g[2] for g in gaps]
    assert all(highs[i] < lows[i + 1] + SLOP for i in range(3)), gaps
    assert all(high >= cap * 0.8 - SLOP and low <= cap for _, low, high in gaps[3:]), gaps
    # An explicit DELAY 0 overrides the backoff: queued at once.
    assert call(node, "GETJOB", "TIMEOUT", "5000", "FROM", "bq")[0][1] == job_id
    assert call(node, "NACK", job_id, "DELAY", "0") == 1
    assert qlen(node, "bq") == 1 and b"redeliver-at" not in show(node, job_id)


def test_backoff_fixed_waits_the_same_band_every_time(node):
    job_id = call(node, "ADDJOB", "fq", "f", "0", "RETRY", "30", "BACKOFF", "FIXED", "300")
    for i in range(1, 4):
        assert call(node, "GETJOB", "TIMEOUT", "5000", "FROM", "fq")[0][1] == job_id
        _, low, high = nack_and_measure(node, job_id)
        assert 240 - SLOP <= high and low <= 300, (i, low, high)


# -- dead letters ------------------------------------------------------------------------

def dlq_total(nodes, queue):
    return sum(qlen(n, queue) for n in nodes)


def test_dead_letter_on_a_cluster_with_kills(tmp_path):
    """MAXDELIVERIES 2: the third delivery is never made; the job moves to
    dq:dead, once cluster-wide, with the same derived ID on every copy, and
    the original is acknowledged and collected everywhere.  Killing the
    node where the dead letter is queued loses nothing: another copy
    queues it RETRY later.  Its ACK acknowledges it on every live copy."""
    a, b, c = nodes = start_cluster(tmp_path, 3, hosts=HOSTS)
    try:
        job_id = call(a, "ADDJOB", "dq", "doomed", "0", "REPLICATE", "3", "RETRY", "1", "MAXDELIVERIES", "2")
        dead_id = dead_letter_id(job_id)
        for i in range(2):  # deliveries 1 and 2, each NACKed
            job = take(a, "dq")
            assert job is not None and job["id"] == job_id and job["nacks"] == i
            assert call(a, "NACK", job_id) == 1
        assert dlq_total(nodes, "dq") == 0, "delivered a third time"

        wait_for(lambda: dlq_total(nodes, "dq:dead") == 1, what="the dead letter queued")
        holder = next(n for n in nodes if qlen(n, "dq:dead") == 1)
        assert holder is a  # the deciding node queues it
        s = show(a, dead_id)
        assert s[b"state"] == b"queued" and s[b"queue"] == b"dq:dead" and s[b"body"] == b"doomed"
        assert s[b"dead-from"] == b"dq" and s[b"dead-reason"] == b"max-deliveries"
        assert s[b"nacks"] == 2 and s[b"dedup"] == job_id and s[b"retry"] == 1 and s[b"repl"] == 3
        assert qstat(a, "dq")[b"dead"] == 1
        # The same job, by the same ID, on every copy of the original.
        wait_for(lambda: all(show(n, dead_id) is not None for n in nodes), what="the dead letter on every copy")
        for n in (b, c):
            copy = show(n, dead_id)
            assert copy[b"state"] == b"active" and copy[b"dead-from"] == b"dq" and copy[b"nacks"] == 2
        # The original: acknowledged, then collected on every node.
        wait_for(lambda: all(show(n, job_id) is None for n in nodes), timeout=10, what="the original collected")
        # It stays queued once: the other copies' WILLQUEUE hears QUEUED.
        deadline = time.time() + 2.0  # past RETRY + TIME_ERR of the copies
        while time.time() < deadline:
            assert [qlen(n, "dq:dead") for n in nodes] == [1, 0, 0]
            time.sleep(0.1)
        assert all(qlen(n, "dq") == 0 for n in nodes)

        # Kill the holder: B or C queues it after RETRY.
        a.kill()
        wait_for(lambda: dlq_total((b, c), "dq:dead") == 1, timeout=6, interval=0.05,
                 what="another copy to queue the dead letter")
        survivor = b if qlen(b, "dq:dead") == 1 else c
        job = take(survivor, "dq:dead")
        assert job["id"] == dead_id and job["body"] == b"doomed" and job["nacks"] == 2
        assert call(survivor, "ACKJOB", dead_id) == 1
        for n in (b, c):
            wait_for(lambda: (show(n, dead_id) or {b"state": b"acked"})[b"state"] == b"acked",
                     what="the dead letter acknowledged on %d" % n.port)
        deadline = time.time() + 2.0
        while time.time() < deadline:  # never delivered again
            assert take(b, "dq:dead") is None and take(c, "dq:dead") is None
            time.sleep(0.1)
    finally:
        killed(nodes)


def stop_past_requeue_and_resume(nodes, job_ids):
    """SIGSTOP every node until every copy of ``job_ids`` is past its
    requeue time, then SIGCONT them together, each with a request waiting:
    its event loop wakes at once (not at its next timer, or at a peer's
    message, which would tell it of another's decision first) and runs its
    overdue requeue timers."""
    latest = max(now_ms() + show(n, j)[b"next-requeue-within"] for n in nodes for j in job_ids)
    wakers = [n.client() for n in nodes]
    for n in nodes:
        n.proc.send_signal(signal.SIGSTOP)
    try:
        time.sleep(max(latest - now_ms(), 0) / 1000 + 0.2)  # stopped nodes cannot be polled
        for w in wakers:
            w.send(w.encode("PING"))
    finally:
        for n in nodes:
            n.proc.send_signal(signal.SIGCONT)
    for w in wakers:
        assert w.read() == b"PONG"
        w.close()


def test_dead_letter_decided_on_several_nodes_at_once_is_queued_once(tmp_path):
    """MAXDELIVERIES 1, RETRY 1, delivered and never acknowledged: every
    copy's requeue timer makes the dead letter.  All three nodes are
    stopped past their requeue times and resumed together, so several
    decide before hearing the others: the dead letters are the same job,
    and the tie break leaves it queued on one node.  Whether two nodes did
    decide at once depends on the scheduling of three processes, so rounds
    of two jobs (each with its own dead-letter queue) are made until one
    shows it (QSTAT's ``dead`` counts the node's decisions).  Each round's
    dead letters are checked and acknowledged before the next round stops
    the nodes: a dead letter left queued has RETRY 1 too, so stopping every
    node past it would (rightly) deliver it again and count that."""
    nodes = start_cluster(tmp_path, 3, hosts=HOSTS)
    a = nodes[0]
    try:
        deciders = []
        for rnd in range(5):
            batch = []
            for i in range(2):
                q = "tq%d-%d" % (rnd, i)
                job_id = call(a, "ADDJOB", q, "body-%s" % q, "0", "REPLICATE", "3", "RETRY", "1",
                              "MAXDELIVERIES", "1")
                assert take(a, q)["id"] == job_id
                batch.append((q, job_id))
            stop_past_requeue_and_resume(nodes, [j for _, j in batch])

            def settled():
                return all(dlq_total(nodes, q + ":dead") == 1 and all(show(n, j) is None for n in nodes)
                           for q, j in batch)

            wait_for(settled, timeout=10, interval=0.1, what="one dead letter per job, originals collected")
            deciders += [sum(1 for n in nodes if qstat(n, q).get(b"dead")) for q, _ in batch]
            deadline = time.time() + 2.0  # past RETRY + TIME_ERR: the tie break holds
            while time.time() < deadline:
                assert [dlq_total(nodes, q + ":dead") for q, _ in batch] == [1] * len(batch)
                assert all(qlen(n, q) == 0 for n in nodes for q, _ in batch)  # the original never again
                time.sleep(0.1)
            for q, job_id in batch:
                dead_id = dead_letter_id(job_id)
                holder = next(n for n in nodes if qlen(n, q + ":dead") == 1)
                job = take(holder, q + ":dead")
                assert job["id"] == dead_id and job["body"] == b"body-" + q.encode()
                assert (job["nacks"], job["deliv"]) == (0, 1)
                assert all(show(n, dead_id)[b"dead-from"] == q.encode() for n in nodes)
                assert call(holder, "ACKJOB", dead_id) == 1
            wait_for(lambda: all(show(n, dead_letter_id(j)) is None for n in nodes for _, j in batch),
                     timeout=10, what="the dead letters collected after their ACK")
            if max(deciders) >= 2:
                break
        assert max(deciders) >= 2, "no job was decided on two nodes at once: %r" % deciders
    finally:
        killed(nodes)


# -- PRIORITY --------------------------------------------------------------------------------

def test_priorities_are_served_highest_first_through_federation(tmp_path):
    """Nine jobs of priorities 1..9, added on A in ascending order with
    REPLICATE 1 (no copy on B).  A consumer on B gets them through
    federation, 9 first: the order of the pick on A and of B's queue, with
    the priority carried on the bus."""
    a, b, c = nodes = start_cluster(tmp_path, 3, hosts=HOSTS)
    try:
        ids = {}
        for p in range(1, 10):
            ids[p] = call(a, "ADDJOB", "pq", "p%d" % p, "0", "REPLICATE", "1", "RETRY", "30", "PRIORITY", str(p))
        assert all(show(b, j) is None for j in ids.values())
        assert qlen(b, "pq") == 0
        assert [j[2] for j in call(a, "QPEEK", "pq", "9")] == [b"p%d" % p for p in range(9, 0, -1)]
        served = []
        for _ in range(9):
            reply = call(b, "GETJOB", "TIMEOUT", "8000", "FROM", "pq")
            assert reply is not None, "B got nothing after %r" % served
            (queue, job_id, body), = reply
            served.append(body)
            s = show(b, job_id)
            assert s[b"priority"] == int(body[1:])  # carried on the bus
            assert call(b, "ACKJOB", job_id) == 1
        assert served == [b"p%d" % p for p in range(9, 0, -1)]
        assert qstat(b, "pq")[b"import-from"] == [call(a, "CLUSTER", "MYID")]
    finally:
        killed(nodes)
