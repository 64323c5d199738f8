"""A rolling upgrade, for real: one node of the previous version (commit
c0d8c67, the last one before cluster bus version 3, taken from this
repository's history with ``git archive``) and two nodes of this version,
``twistd -n disque`` processes on 127.0.0.1, 127.0.0.2 and 127.0.0.3.

The old node runs on the same interpreter with ``PYTHONPATH`` pointing at
the extracted tree, so that tree's ``disque`` package and twistd plugin are
the ones imported (checked: it lacks what only this version has).  What is
checked: the three mesh and stay meshed (no link is ever dropped, in either
direction); plain jobs replicate, move and are acknowledged across all
three; jobs with options only ever reach the new nodes (ADDJOB's
replication, federation), and NACK ... DELAY is refused for a job with a
copy on the old node.
"""

import re
import time

import pytest

from tests.support.resp import is_error
from tests.support.previous import extract
from tests.support.process import NodeProcess, call, cluster_info, show, wait_for, wait_full_mesh

PREVIOUS = "c0d8c67"  # bus version 2: reads no H_EXTENSIONS, job options nor NACKDELAY
OLD, A, B = 0, 1, 2  # indices in the cluster fixture: the old node, then the two new ones

# What no node's log may say: a dropped or lost link (a frame its peer could
# not read), a message held back because its peer is old (the core must
# never try), a crash.
TROUBLE = re.compile(r"Dropping bus link|Bus link to .* lost|not sending|Traceback|Unhandled")


def holders(nodes, job_id):
    return [i for i, n in enumerate(nodes) if show(n, job_id) is not None]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """[old, new, new], in a full mesh, stopped after the module."""
    base = tmp_path_factory.mktemp("mixed")
    old_tree = extract(PREVIOUS, base / "previous")
    nodes = [NodeProcess(base / "old", host="127.0.0.1", env={"PYTHONPATH": old_tree}),
             NodeProcess(base / "new1", host="127.0.0.2"),
             NodeProcess(base / "new2", host="127.0.0.3")]
    try:
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        # The old node meets a new one, which meets the other: the old node
        # learns of the second new node through gossip only.
        assert call(nodes[OLD], "CLUSTER", "MEET", nodes[A].host, str(nodes[A].port)) == b"OK"
        assert call(nodes[A], "CLUSTER", "MEET", nodes[B].host, str(nodes[B].port)) == b"OK"
        wait_full_mesh(nodes, 20)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def link_states(node):
    """{peer address: (flags, link state)} from ``node``'s CLUSTER NODES."""
    out = {}
    for line in call(node, "CLUSTER", "NODES").decode().splitlines():
        _, addr, flags, _, _, link = line.split()
        if flags != "myself":
            out[addr] = (flags, link)
    return out


def assert_all_connected(nodes):
    for i, node in enumerate(nodes):
        assert node.proc.poll() is None, "node %d exited:\n%s" % (i, node.log())
        expected = {"%s:%d" % (n.host, n.port): ("noflags", "connected") for n in nodes if n is not node}
        assert link_states(node) == expected, "node %d" % i
        assert cluster_info(node)["cluster_reachable_nodes"] == "2", "node %d" % i


def assert_quiet_logs(nodes):
    for i, node in enumerate(nodes):
        trouble = [line for line in node.log().splitlines() if TROUBLE.search(line)]
        assert not trouble, "node %d (%s) logged:\n%s" % (i, "old" if i == OLD else "new", "\n".join(trouble))


# -- the versions, the mesh ----------------------------------------------------------

def test_the_old_node_runs_the_previous_version(mixed):
    old, a, b = mixed
    # max-deliveries came with bus version 3: the old node does not know it.
    assert call(old, "CONFIG", "GET", "max-deliveries") == []
    assert call(a, "CONFIG", "GET", "max-deliveries") == [b"max-deliveries", b"0"]
    # NACK ... DELAY neither: there, DELAY and 1000 are job IDs.
    job_id = call(a, "ADDJOB", "versionq", "x", "0", "REPLICATE", "1")
    assert call(a, "GETJOB", "NOHANG", "FROM", "versionq")[0][1] == job_id
    assert is_error(call(old, "NACK", job_id, "DELAY", "1000"), "BADID")
    assert call(a, "NACK", job_id, "DELAY", "1000") == 1
    call(a, "DELJOB", job_id)


def test_full_mesh_both_ways(mixed):
    assert_all_connected(mixed)
    # The bus carried frames both ways between every pair, and still does.
    before = [int(cluster_info(n)["cluster_stats_messages_received"]) for n in mixed]
    wait_for(lambda: all(int(cluster_info(n)["cluster_stats_messages_received"]) > before[i] + 2
                         for i, n in enumerate(mixed)), timeout=10, what="pings on every node")
    assert_all_connected(mixed)
    assert_quiet_logs(mixed)


# -- plain jobs --------------------------------------------------------------------

def _plain_job_round_trip(mixed, producer, consumer, acker, queue, body):
    """A plain REPLICATE 3 job added on ``producer``: queued there, an
    active copy (without options) on each other node; a consumer blocked
    on ``consumer`` gets it moved there (YOURJOBS across versions), and
    ACKJOB on ``acker`` removes every copy."""
    job_id = call(mixed[producer], "ADDJOB", queue, body, "0", "REPLICATE", "3")
    assert isinstance(job_id, bytes) and job_id.startswith(b"D-"), job_id
    assert holders(mixed, job_id) == [OLD, A, B]
    assert show(mixed[producer], job_id)[b"state"] == b"queued"
    for i, node in enumerate(mixed):
        if i == producer:
            continue
        copy = show(node, job_id)
        assert copy[b"state"] == b"active" and copy[b"body"] == body.encode() and copy[b"repl"] == 3
        assert b"priority" not in copy
        assert sorted(copy[b"nodes-delivered"]) == sorted(call(n, "CLUSTER", "MYID") for n in mixed)
    got = call(mixed[consumer], "GETJOB", "TIMEOUT", "5000", "FROM", queue)
    assert got is not None and got[0][1:] == [job_id, body.encode()]
    assert call(mixed[acker], "ACKJOB", job_id) == 1
    wait_for(lambda: holders(mixed, job_id) == [], timeout=10, what="the ACK on every node")


def test_plain_job_from_a_new_node_everywhere_then_acked_on_the_old_one(mixed):
    _plain_job_round_trip(mixed, producer=A, consumer=OLD, acker=OLD, queue="plainq1", body="from a new node")


def test_plain_job_from_the_old_node_everywhere_then_acked_on_a_new_one(mixed):
    _plain_job_round_trip(mixed, producer=OLD, consumer=B, acker=A, queue="plainq2", body="from the old node")


# -- jobs with options -----------------------------------------------------------

def test_jobs_with_options_go_to_the_new_nodes_only(mixed):
    old, a, b = mixed
    variants = [("PRIORITY", "9"), ("BACKOFF", "FIXED", "500"), ("MAXDELIVERIES", "3", "DEADLETTER", "optdead"),
                ("PRIORITY", "2", "BACKOFF", "EXP", "100", "1000")]
    ids = []
    for k in range(8):  # the replica is picked at random: never the old node
        opts = variants[k % len(variants)]
        job_id = call(a, "ADDJOB", "optq", "opt-%d" % k, "0", "REPLICATE", "2", *opts)
        assert isinstance(job_id, bytes) and job_id.startswith(b"D-"), job_id
        ids.append(job_id)
        assert holders(mixed, job_id) == [A, B]
        copy = show(b, job_id)
        assert copy[b"state"] == b"active" and copy[b"body"] == b"opt-%d" % k
        assert copy[b"priority"] == show(a, job_id)[b"priority"]  # the options crossed the bus
    assert show(b, ids[0])[b"priority"] == 9
    assert show(b, ids[1])[b"backoff"] == [500, 500]
    assert show(b, ids[2])[b"max-deliveries"] == 3 and show(b, ids[2])[b"dead-letter"] == b"optdead"
    assert call(old, "QLEN", "optq") == 0
    # Three copies would need the old node.
    qlen = call(a, "QLEN", "optq")
    for opts in variants:
        reply = call(a, "ADDJOB", "optq", "three", "0", "REPLICATE", "3", *opts)
        assert is_error(reply, "NOREPL") and "among the nodes that support job options" in str(reply), reply
    assert call(a, "QLEN", "optq") == qlen  # nothing was added
    assert call(b, "QLEN", "optq") == 0 and call(old, "QLEN", "optq") == 0
    # The same without options is fine.
    plain = call(a, "ADDJOB", "optq", "three", "0", "REPLICATE", "3")
    assert holders(mixed, plain) == [OLD, A, B]
    call(a, "ACKJOB", plain, *ids)
    wait_for(lambda: all(holders(mixed, j) == [] for j in ids + [plain]), timeout=10, what="ACKs")


def test_nack_delay_refused_for_a_job_with_a_copy_on_the_old_node(mixed):
    old, a, b = mixed
    job_id = call(a, "ADDJOB", "nackq", "plain", "0", "REPLICATE", "3", "RETRY", "60")
    assert holders(mixed, job_id) == [OLD, A, B]
    got = call(a, "GETJOB", "NOHANG", "FROM", "nackq")
    assert got[0][1] == job_id
    before = [show(n, job_id) for n in mixed]
    assert all(copy[b"nacks"] == 0 for copy in before)
    reply = call(a, "NACK", job_id, "DELAY", "1000")
    assert is_error(reply, "ERR") and "older version" in str(reply), reply
    time.sleep(0.3)  # anything sent would have arrived
    after = [show(n, job_id) for n in mixed]
    for i, (x, y) in enumerate(zip(before, after)):
        for field in (b"state", b"nacks", b"additional-deliveries", b"nodes-delivered"):
            assert x[field] == y[field], (i, field, x[field], y[field])
        assert b"redeliver-at" not in y
    assert after[A][b"state"] == b"active"
    # A plain NACK still works, and reaches the old node's copy.
    assert call(a, "NACK", job_id) == 1
    assert show(a, job_id)[b"state"] == b"queued" and show(a, job_id)[b"nacks"] == 1
    call(a, "ACKJOB", job_id)
    wait_for(lambda: holders(mixed, job_id) == [], timeout=10, what="ACK")


def test_nack_delay_works_for_jobs_on_the_new_nodes_only(mixed):
    old, a, b = mixed
    ids = [call(a, "ADDJOB", "nackq2", "options", "0", "REPLICATE", "2", "PRIORITY", "5", "RETRY", "60"),
           call(a, "ADDJOB", "nackq2", "single copy", "0", "REPLICATE", "1", "RETRY", "60")]
    assert holders(mixed, ids[0]) == [A, B] and holders(mixed, ids[1]) == [A]
    for job_id in ids:
        got = call(a, "GETJOB", "NOHANG", "FROM", "nackq2")
        assert got[0][1] in ids
    t0 = time.time()
    assert call(a, "NACK", *ids, "DELAY", "1000") == 2
    for job_id in ids:
        copy = show(a, job_id)
        assert copy[b"state"] == b"active" and copy[b"nacks"] == 1 and b"redeliver-at" in copy
    # B's copy heard NACKDELAY: the NACK counted there too.
    wait_for(lambda: show(b, ids[0])[b"nacks"] == 1, timeout=5, what="NACKDELAY on B")
    wait_for(lambda: all(show(a, j)[b"state"] == b"queued" for j in ids), timeout=10, what="queued again")
    assert time.time() - t0 >= 0.9
    call(a, "ACKJOB", *ids)
    wait_for(lambda: all(holders(mixed, j) == [] for j in ids), timeout=10, what="ACKs")


# -- federation ----------------------------------------------------------------

def test_federation_moves_plain_jobs_to_the_old_node_never_jobs_with_options(mixed):
    old, a, b = mixed
    # One copy each, queued on A only: a consumer elsewhere gets them only by
    # federation.  The plain jobs come first in the queue, then the jobs with
    # options (the default priority, created later; the lowest priority).
    plain_ids = [call(a, "ADDJOB", "fedq", "plain-%d" % k, "0", "REPLICATE", "1") for k in range(2)]
    opt_ids = [call(a, "ADDJOB", "fedq", "backoff", "0", "REPLICATE", "1", "BACKOFF", "FIXED", "100"),
               call(a, "ADDJOB", "fedq", "priority 1", "0", "REPLICATE", "1", "PRIORITY", "1")]
    assert [j[1] for j in call(a, "QPEEK", "fedq", "4")] == plain_ids + opt_ids
    consumer = old.client()
    try:
        moved = []
        for _ in plain_ids:
            got = consumer.call("GETJOB", "TIMEOUT", "8000", "FROM", "fedq")
            assert got is not None, "the old node's consumer got nothing: plain jobs were not moved there"
            moved.append(got[0][1])
        assert moved == plain_ids
        # Nothing more for it: the jobs with options stay on A.
        assert consumer.call("GETJOB", "TIMEOUT", "2500", "FROM", "fedq") is None
    finally:
        consumer.close()
    for job_id in opt_ids:
        assert show(old, job_id) is None
        assert holders(mixed, job_id) == [A] and show(a, job_id)[b"state"] == b"queued"
    # A consumer of the other new node gets them (the same federation, to a
    # node that reads job options), options included.
    taken = []
    for _ in opt_ids:  # (federation asks for one job, then for more)
        got = call(b, "GETJOB", "TIMEOUT", "8000", "FROM", "fedq")
        assert got is not None, "a consumer of a new node got nothing"
        taken.append(got[0][1])
    assert taken == opt_ids
    assert show(b, opt_ids[0])[b"backoff"] == [100, 100] and show(b, opt_ids[1])[b"priority"] == 1
    assert all(show(old, j) is None for j in opt_ids)
    call(b, "ACKJOB", *opt_ids, *plain_ids)
    wait_for(lambda: all(holders(mixed, j) == [] for j in opt_ids + plain_ids), timeout=10, what="ACKs")


# A known bug, reported as an expected failure while it lasts (the test
# passes as soon as it is fixed; any other wrong outcome fails it).
def test_federation_moves_plain_jobs_behind_a_job_with_options_to_the_old_node(mixed):
    old, a, b = mixed
    # PRIORITY 9 puts the job with options at the head of the queue.
    opt_id = call(a, "ADDJOB", "fedq2", "with options", "0", "REPLICATE", "1", "PRIORITY", "9")
    plain_id = call(a, "ADDJOB", "fedq2", "plain", "0", "REPLICATE", "1")
    assert call(a, "QPEEK", "fedq2", "1")[0][1] == opt_id
    try:
        got = call(old, "GETJOB", "TIMEOUT", "3000", "FROM", "fedq2")
        assert show(old, opt_id) is None
        assert got is not None and got[0][1] == plain_id, "the plain job behind must move (not stop at the head)"
    finally:
        for job_id in (opt_id, plain_id):
            for node in mixed:
                call(node, "DELJOB", job_id)


def test_a_queue_limit_stays_among_the_new_nodes(mixed):
    """QLIMIT (bus version 6) on a new node: the other new node learns it
    and the two share it; the old node never sees it nor a QDEMAND (the
    quiet logs of the last test: no "not sending")."""
    assert call(mixed[A], "QLIMIT", "limitedq", "CONCURRENCY", "4") == b"OK"

    def shown(node):
        reply = call(node, "QLIMIT", "limitedq")
        return dict(zip(reply[::2], reply[1::2]))

    wait_for(lambda: shown(mixed[B]).get(b"concurrency") == 4, timeout=10, what="the limit on the other new node")
    # Two nodes split it (the old one counts for nothing): two slots each.
    wait_for(lambda: shown(mixed[A]).get(b"concurrency-here") == shown(mixed[B]).get(b"concurrency-here") == 2,
             timeout=10, what="the limit split between the new nodes")
    assert is_error(call(mixed[OLD], "QLIMIT", "limitedq"))  # an unknown command there
    assert call(mixed[B], "QLIMIT", "limitedq", "NONE") == b"OK"
    wait_for(lambda: shown(mixed[A]) == {}, timeout=10, what="the limit removed")


# -- after all that ------------------------------------------------------------------

def test_still_meshed_after_mixed_traffic(mixed):
    """Seconds of every kind of traffic: plain jobs added, consumed and
    acknowledged on different nodes of both versions, jobs with options
    NACKed with a BACKOFF (NACKDELAY between the new nodes)."""
    deadline = time.time() + 3
    k = 0
    while time.time() < deadline:
        src, acker = mixed[k % 3], mixed[(k + 1) % 3]
        queue = "trafficq%d" % (k % 3)
        job_id = call(src, "ADDJOB", queue, "t%d" % k, "0", "REPLICATE", "3")
        assert isinstance(job_id, bytes) and job_id.startswith(b"D-"), job_id
        assert call(src, "GETJOB", "NOHANG", "FROM", queue)[0][1] == job_id
        assert call(acker, "ACKJOB", job_id) == 1
        new = mixed[A + k % 2]
        opt = call(new, "ADDJOB", "trafficopt", "o%d" % k, "0", "REPLICATE", "2", "PRIORITY", "7",
                   "BACKOFF", "FIXED", "50")
        assert isinstance(opt, bytes) and opt.startswith(b"D-"), opt
        assert call(new, "GETJOB", "NOHANG", "FROM", "trafficopt")[0][1] == opt
        assert call(new, "NACK", opt) == 1
        assert show(mixed[B - k % 2], opt) is not None and show(mixed[OLD], opt) is None
        call(new, "ACKJOB", opt)
        k += 1
    assert k > 5
    time.sleep(0.5)  # what is still in flight arrives
    assert_all_connected(mixed)
    assert_quiet_logs(mixed)
