"""AOF persistence in real processes: kill -9 and restart, truncated and
corrupt files, the repair tool, controlled restarts, rewrites, switching
AOF on at run time."""

import pytest
import os
import subprocess
import sys
import time

from tests.support.process import (NodeProcess, call, connect_when_listening, info, parse_info, redis_cli, run_twistd, show,
                     wait_for)

AOF = ("--appendonly", "yes", "--set", "appendfsync=always")


def aof_path(node):
    return os.path.join(node.workdir, "disque.aof")


def add(node, n, *opts, queue="aq"):
    return [call(node, "ADDJOB", queue, "job-%d" % i, "0", *opts) for i in range(n)]


def test_kill9_and_restart_brings_jobs_back_active_then_requeued(tmp_path):
    node = NodeProcess(tmp_path / "n", args=AOF).start()
    try:
        ids = add(node, 30, "RETRY", "1")
        once = add(node, 5, "RETRY", "0", queue="once")
        acked = ids[:10]
        assert call(node, "ACKJOB", *acked) == 10
        taken = call(node, "GETJOB", "COUNT", "5", "FROM", "once")
        assert len(taken) == 5
        i = info(node.client(), "persistence")
        assert i["aof_enabled"] == "1" and i["aof_state"] == "on"
        node.kill()
        node.start()
        assert all(show(node, j) is None for j in acked)
        back = [show(node, j) for j in ids[10:]]
        assert all(b is not None and b[b"state"] in (b"active", b"queued") for b in back)
        # Loaded jobs are not queued at once: their retry timers requeue them.
        wait_for(lambda: call(node, "QLEN", "aq") == 20, timeout=5, what="requeue after RETRY")
        # RETRY 0 jobs are never requeued after a crash restart.
        time.sleep(1.2)
        assert call(node, "QLEN", "once") == 0
        assert all(show(node, j)[b"state"] == b"active" for j in once)
    finally:
        node.kill()


def test_truncated_last_record_is_repaired_with_a_warning(tmp_path):
    node = NodeProcess(tmp_path / "n", args=AOF).start()
    try:
        ids = add(node, 10)
        node.kill()
        with open(aof_path(node), "ab") as f:
            f.write(b"*2\r\n$7\r\nLOADJOB\r\n$300\r\nhalf a rec")  # torn write
        node.start()
        assert all(show(node, j) is not None for j in ids)
        assert "truncated" in node.log()
        ok = subprocess.run([sys.executable, "-m", "disque.tools.check_aof", aof_path(node)],
                            capture_output=True, text=True)
        assert ok.returncode == 0 and "valid" in ok.stdout
    finally:
        node.kill()


def test_corruption_in_the_middle_stops_start_up_and_the_tool_repairs_it(tmp_path):
    node = NodeProcess(tmp_path / "n", args=AOF).start()
    ids = add(node, 6)
    node.kill()
    path = aof_path(node)
    data = open(path, "rb").read()
    cut = data.index(b"*3\r\n$7\r\nLOADJOB", len(data) // 2)
    with open(path, "wb") as f:
        f.write(data[:cut] + b"GARBAGE!\r\n" + data[cut:])
    rc, out = run_twistd(["--dir", node.workdir, "--port", str(node.port), *AOF], tmp_path)
    assert rc != 0 and "append only file" in out and "check_aof" in out and "Traceback" not in out
    check = subprocess.run([sys.executable, "-m", "disque.tools.check_aof", path], capture_output=True, text=True)
    assert check.returncode == 1 and "offset %d" % cut in check.stdout
    fix = subprocess.run([sys.executable, "-m", "disque.tools.check_aof", "--fix", path],
                         capture_output=True, text=True)
    assert fix.returncode == 0 and os.path.getsize(path) == cut and os.path.exists(path + ".bak")
    node.start()
    try:
        present = [j for j in ids if show(node, j) is not None]
        assert 0 < len(present) < len(ids) and present == ids[:len(present)]
    finally:
        node.kill()


def test_controlled_restart_keeps_queues_even_without_aof(tmp_path):
    node = NodeProcess(tmp_path / "n").start()  # appendonly no
    try:
        queued = add(node, 8, "RETRY", "0", "REPLICATE", "1", queue="cq")
        taken = call(node, "GETJOB", "COUNT", "3", "FROM", "cq")
        assert call(node, "CONFIG", "SET", "aof-enqueue-jobs-once", "yes") == b"OK"
        c = node.client()
        c.send(c.encode("SHUTDOWN", "REWRITE-AOF"))
        assert c.closed_within(10)
        node.proc.wait(10)
        node.start()
        assert call(node, "QLEN", "cq") == 5  # the queue as it was, RETRY 0 jobs included
        got = [j[1] for j in call(node, "GETJOB", "COUNT", "10", "FROM", "cq")]
        assert got == queued[3:]
        assert call(node, "CONFIG", "GET", "aof-enqueue-jobs-once")[1] == b"no"
        assert all(show(node, t[1])[b"state"] == b"active" for t in taken)
        # Loaded once: a crash now does not bring the old queues back.
        node.kill()
        node.start()
        assert call(node, "QLEN", "cq") == 0 and show(node, queued[0]) is None
    finally:
        node.kill()


def test_bgrewriteaof_compacts_without_stopping_clients(tmp_path):
    node = NodeProcess(tmp_path / "n", args=AOF).start()
    try:
        ids = add(node, 300)
        call(node, "ACKJOB", *ids[:250])
        before = os.path.getsize(aof_path(node))
        assert call(node, "BGREWRITEAOF") == b"Background append only file rewriting started"
        late = call(node, "ADDJOB", "aq", "during", "0")
        wait_for(lambda: info(node.client(), "persistence")["aof_rewrite_in_progress"] == "0", timeout=10,
                 what="rewrite done")
        assert info(node.client(), "persistence")["aof_last_bgrewrite_status"] == "ok"
        assert os.path.getsize(aof_path(node)) < before / 3
        node.kill()
        node.start()
        assert [j for j in ids + [late] if show(node, j) is not None] == ids[250:] + [late]
    finally:
        node.kill()


def test_kill9_and_restart_brings_the_schedules_back_through_a_rewrite(tmp_path):
    """The catalog's CATALOG records: what a schedule change appended, and
    what a rewrite wrote, are back after kill -9 (a deleted one stays
    deleted)."""
    node = NodeProcess(tmp_path / "n", args=AOF).start()
    try:
        assert call(node, "SCHEDULE", "ADD", "nightly", "sq", "body", "CRON", "0 3 * * *") == b"OK"
        assert call(node, "SCHEDULE", "ADD", "gone", "sq", "body", "EVERY", "86400000") == b"OK"
        assert call(node, "SCHEDULE", "DEL", "gone") == 1
        node.kill()
        node.start()
        assert call(node, "SCHEDULE", "LIST") == [b"nightly"]
        assert call(node, "BGREWRITEAOF") == b"Background append only file rewriting started"
        wait_for(lambda: info(node.client(), "persistence")["aof_rewrite_in_progress"] == "0", timeout=10,
                 what="rewrite done")
        assert call(node, "SCHEDULE", "ADD", "hourly", "sq", "body", "CRON", "0 * * * *") == b"OK"
        node.kill()
        result = subprocess.run([sys.executable, "-m", "disque.tools.check_aof", aof_path(node)],
                                capture_output=True, text=True)
        # the rewrite's two entries (nightly, gone's tombstone), then hourly's
        assert result.returncode == 0 and "AOF is valid: 3 records (3 catalog entries)" in result.stdout, result.stdout
        node.start()
        assert call(node, "SCHEDULE", "LIST") == [b"hourly", b"nightly"]
    finally:
        node.kill()


def test_appendonly_can_be_switched_on_at_run_time(tmp_path):
    node = NodeProcess(tmp_path / "n").start()
    try:
        before = add(node, 5)
        assert not os.path.exists(aof_path(node))
        assert call(node, "CONFIG", "SET", "appendonly", "yes") == b"OK"
        after = add(node, 5)
        wait_for(lambda: info(node.client(), "persistence")["aof_rewrite_in_progress"] == "0", timeout=10,
                 what="first rewrite")
        assert info(node.client(), "persistence")["aof_state"] == "on"
        node.kill()
        node.args += ["--appendonly", "yes"]
        node.start()
        assert all(show(node, j) is not None for j in before + after)
    finally:
        node.kill()


@pytest.mark.slow
def test_seven_nodes_all_killed_and_restarted_lose_no_acknowledged_job(tmp_path):
    from tests.support.process import start_cluster, wait_full_mesh

    nodes = start_cluster(tmp_path, 7, args=AOF + ("--cluster-node-timeout", "1000"), timeout=60)
    try:
        ids = []
        for i in range(70):
            reply = call(nodes[i % 7], "ADDJOB", "cq", "job-%d" % i, "0", "REPLICATE", "3", "RETRY", "1")
            assert reply.startswith(b"D-")
            ids.append(reply)
        for n in nodes:
            n.kill()  # the whole cluster, at once
        for n in nodes:
            n.start(wait=False)
        for n in nodes:
            n.wait_ready()
        wait_full_mesh(nodes, timeout=30)
        my_ids = [call(n, "CLUSTER", "MYID") for n in nodes]
        for job_id in ids:
            records = {my_id: show(n, job_id) for my_id, n in zip(my_ids, nodes)}
            holders = {my_id for my_id, record in records.items() if record is not None}
            sent_to = {i for record in records.values() if record for i in record[b"nodes-delivered"]}
            # Every acknowledged copy survived.  A replication slower than
            # REPL_RETRY_MS (a loaded machine) sends the job to one more node
            # each 50 ms, so there may be more: only on nodes it was sent to.
            assert len(holders) >= 3 and holders <= sent_to, (job_id, len(holders), holders - sent_to)
        # And they are delivered again (requeued by their RETRY timers).
        seen = set()

        def drain():
            for n in nodes:
                for job in call(n, "GETJOB", "NOHANG", "COUNT", "100", "FROM", "cq") or []:
                    seen.add(job[1])
                    call(n, "ACKJOB", job[1])
            return seen >= set(ids)

        wait_for(drain, timeout=20, interval=0.3, what="every job delivered after the restart")
    finally:
        for n in nodes:
            n.kill()


def test_everysec_and_no_lose_nothing_on_a_process_crash(tmp_path):
    """What everysec (and no) can lose is an OS crash's worth of unsynced
    writes; a killed process loses nothing: records are written before the
    reply leaves.  Measured here for kill -9 right after the last reply."""
    for policy in ("everysec", "no"):
        node = NodeProcess(tmp_path / policy, args=("--appendonly", "yes", "--set", "appendfsync=" + policy)).start()
        try:
            c = node.client()
            c.send(b"".join(c.encode("ADDJOB", "eq", "j%d" % i, "0") for i in range(500)))
            ids = [c.read() for _ in range(500)]
            node.kill()  # no grace: right after the 500th reply
            c.close()
            node.start()
            assert sum(1 for j in ids if show(node, j) is not None) == 500, policy
        finally:
            node.kill()


def test_a_restarted_node_hears_of_acks_before_it_requeues(tmp_path):
    """All nodes killed at once.  A comes back alone, its copies are
    requeued, delivered and acknowledged there.  Then B comes back: its
    copies of those jobs must not be delivered again.  B loaded them with a
    requeue time long past; it waits for its link to A (C, still down,
    becomes suspected meanwhile), sends WILLQUEUE and hears SETACK, as the
    original's WILLQUEUE intends (issue 14: 5-8% of the acknowledged jobs
    were delivered again here, before B's links were up)."""
    from tests.support.process import start_cluster

    timeout = ("--cluster-node-timeout", "2000")
    a, b, c = start_cluster(tmp_path, 3, args=AOF + timeout)
    try:
        ids = [call(a, "ADDJOB", "rq", "job-%d" % i, "0", "REPLICATE", "3", "RETRY", "1") for i in range(30)]
        assert all(i.startswith(b"D-") for i in ids)
        wait_for(lambda: all(show(n, ids[-1]) is not None for n in (b, c)), what="every copy written")
        for n in (a, b, c):
            n.kill()
        a.start()
        acked = set()

        def take_all():
            for job in call(a, "GETJOB", "NOHANG", "COUNT", "100", "FROM", "rq") or []:
                assert call(a, "ACKJOB", job[1]) == 1
                acked.add(job[1])
            return acked == set(ids)

        wait_for(take_all, timeout=15, interval=0.2, what="every job delivered and acked on A")
        b.start()
        delivered_again = []
        deadline = time.time() + 6  # past C's suspicion (2 s), B's WILLQUEUE and its RETRY
        while time.time() < deadline:
            delivered_again += [job[1] for job in call(b, "GETJOB", "NOHANG", "COUNT", "100", "FROM", "rq") or []]
            time.sleep(0.1)
        assert delivered_again == []
        assert all(show(b, j) is None or show(b, j)[b"state"] == b"acked" for j in ids)
    finally:
        for n in (a, b, c):
            n.kill()


def test_a_node_with_a_damaged_record_starts_without_it_and_its_peers_deliver_the_job(tmp_path):
    """A flipped bit in a job body in one node's AOF: the node refuses to
    start, naming the job; with aof-load-damaged skip it starts without
    the record (and rewrites its file), rejoins the cluster, and the job
    is delivered from the copies its peers hold, body intact, as for a
    node restarted without its AOF."""
    from tests.support.process import start_cluster, wait_full_mesh

    nodes = start_cluster(tmp_path, 3, args=AOF + ("--cluster-node-timeout", "2000"))
    a = nodes[0]
    try:
        victim = call(a, "ADDJOB", "dq", "precious body", "0", "REPLICATE", "3", "RETRY", "2")
        others = [call(a, "ADDJOB", "dq", "other-%d" % i, "0", "REPLICATE", "3", "RETRY", "2") for i in range(5)]
        assert all(j.startswith(b"D-") for j in [victim] + others)
        wait_for(lambda: all(show(n, j) is not None for n in nodes[1:] for j in [victim] + others),
                 what="every copy on the other nodes")
        a.kill()
        path = aof_path(a)
        data = bytearray(open(path, "rb").read())
        at = data.index(b"precious body")
        data[at] ^= 0x20  # b"Precious body": one bit
        with open(path, "wb") as f:
            f.write(bytes(data))
        # Refused by default: one line with the offset, the job and both ways out.
        rc, out = run_twistd(["--dir", a.workdir, "--port", str(a.port), *AOF], tmp_path)
        assert rc == 1 and "Traceback" not in out
        line = [ln for ln in out.splitlines() if "cannot load the append only file" in ln]
        assert len(line) == 1 and "checksum mismatch" in line[0] and victim.decode() in line[0]
        assert "aof-load-damaged skip" in line[0] and "check_aof" in line[0]
        # Started without the damaged record.
        a.args += ["--set", "aof-load-damaged=skip"]
        a.start()
        assert "Damaged AOF record at offset" in a.log() and victim.decode() in a.log()
        assert info(a.client(), "persistence")["aof_load_damaged_records"] == "1"
        assert show(a, victim) is None and all(show(a, j) is not None for j in others)
        wait_full_mesh(nodes, timeout=20)
        delivered = {}

        def take_all():
            for n in nodes:
                for job in call(n, "GETJOB", "NOHANG", "COUNT", "10", "FROM", "dq") or []:
                    delivered[job[1]] = job[2]
                    call(n, "ACKJOB", job[1])
            return set(delivered) >= {victim, *others}

        wait_for(take_all, timeout=20, interval=0.2, what="every job delivered, the damaged one included")
        assert delivered[victim] == b"precious body"
        check = subprocess.run([sys.executable, "-m", "disque.tools.check_aof", path], capture_output=True, text=True)
        assert check.returncode == 0 and "valid" in check.stdout  # rewritten after the load
    finally:
        for n in nodes:
            n.kill()


# -- a big file, loaded while the node serves -LOADING -------------------------------

LOADING = "LOADING Disque is loading the dataset in memory"


def write_big_aof(path, n):
    """``n`` LOADJOB records (~190 bytes each) written straight to the
    file, as the node writes them; returns the job IDs."""
    from disque.core.node import NodeState
    from disque.persistence.records import record_bytes

    node = NodeState(b"a" * 40, now=int(time.time() * 1000))
    ids = []
    with open(path, "wb") as f:
        chunk = []
        for i in range(n):
            job = node.addjob.add(b"bq", b"body-%08d" % i, 1, 0, 30, 3600, 0, False)
            ids.append(job.id)
            chunk.append(record_bytes((b"LOADJOB", job)))
            if len(chunk) == 10_000:
                f.write(b"".join(chunk))
                chunk = []
        f.write(b"".join(chunk))
    return ids


def test_a_big_aof_loads_while_clients_get_loading_and_info_shows_progress(tmp_path):
    n = 150_000  # 28 MB: about 3 s on CPython, 2 s on PyPy
    node = NodeProcess(tmp_path / "n", args=AOF)
    ids = write_big_aof(aof_path(node), n)
    total = os.path.getsize(aof_path(node))
    node.start(wait=False)
    try:
        c = connect_when_listening(node)
        progress = []
        cli_checked = False
        while True:
            # One pipeline, run in one reactor turn: no slice of the load between INFO and the rest.
            c.send(c.encode("INFO", "persistence") + c.encode("ADDJOB", "bq", "new", "0")
                   + c.encode("GETJOB", "NOHANG", "FROM", "bq") + c.encode("PING"))
            fields, replies = parse_info(c.read()), [c.read() for _ in range(3)]
            if fields["loading"] == "0":
                assert replies[0].startswith(b"D-") and replies[2] == b"PONG"
                break
            progress.append(fields)
            assert [str(r) for r in replies] == [LOADING] * 3, replies
            if not cli_checked and float(fields["loading_loaded_perc"]) < 50:  # seconds of loading left
                rc, out = redis_cli(node.port, "ADDJOB", "bq", "new", "0")
                assert out.strip() == LOADING.encode(), out
                cli_checked = True
            time.sleep(0.05)
        assert cli_checked and len(progress) >= 3, progress  # seen loading, more than once
        loaded = [int(f["loading_loaded_bytes"]) for f in progress]
        assert loaded == sorted(loaded) and loaded[-1] > loaded[0]  # growing
        assert all(int(f["loading_total_bytes"]) == total for f in progress)
        assert all(0 <= float(f["loading_loaded_perc"]) <= 100 for f in progress)
        assert all(int(f["loading_eta_seconds"]) >= 0 for f in progress)
        assert any(int(f["loading_rate_bytes_per_sec"]) > 0 and int(f["loading_loaded_records"]) > 0
                   for f in progress)
        assert all(abs(int(f["loading_start_time"]) - time.time()) < 60 for f in progress)
        # Then everything is there, and served.
        assert not any(k.startswith("loading_") for k in info(c, "persistence"))
        assert info(c, "jobs")["registered_jobs"] == str(n + 1)  # and the ADDJOB once loaded
        assert c.call("PING") == b"PONG"
        assert show(node, ids[-1])[b"state"] == b"active" and show(node, ids[0]) is not None
        c.close()
        assert "ready to accept connections" in node.log() and "AOF loaded: %d records" % n in node.log()
    finally:
        node.kill()


def test_a_big_aof_found_bad_half_way_stops_the_node_with_one_line(tmp_path):
    workdir = tmp_path / "n"
    workdir.mkdir()
    path = str(workdir / "disque.aof")
    write_big_aof(path, 20_000)
    data = open(path, "rb").read()
    cut = data.index(b"*3\r\n$7\r\nLOADJOB", len(data) * 2 // 3)
    with open(path, "wb") as f:
        f.write(data[:cut] + b"GARBAGE!\r\n" + data[cut:])
    port = NodeProcess(workdir).port
    # Past 0 bytes a file loads in the background: the node listens first.
    rc, out = run_twistd(["--dir", str(workdir), "--port", str(port), *AOF,
                          "--persistence", "aof:sync-load-max=0"], tmp_path)
    assert "loading the AOF; meanwhile clients" in out
    assert rc == 1 and "disque: cannot load the append only file: unknown record" in out
    assert "offset %d" % cut in out and "check_aof" in out and "Traceback" not in out
