"""The fault suite's checker (tests/tools/faultcheck.py) on synthetic histories:
it finds each kind of fault it reports, and nothing on a clean history; a
job a node still holds is held, not lost, and the drain does not stop
while the cluster holds jobs; the suite's verdict fails a phase for
exactly what its guarantee covers.  Also the pure parts of the storage
nemeses (tests/tools/faultdisk.py): what a sync log says survives a power cut,
the damage done to a file."""

from tests.tools.faultcheck import check, drain_over

ACKED = {"D-1": "a", "D-2": "b", "D-3": "c"}
ATTEMPTED = {"a", "b", "c", "d"}  # d: its ADDJOB never answered with an ID


def test_a_clean_history_has_nothing_to_report():
    r = check(ATTEMPTED, ACKED, [("D-2", "b"), ("D-1", "a"), ("D-3", "c")])
    assert (r["lost"], r["unexpected"], r["duplicates"], r["duplicate_pct"]) == ([], [], 0, 0.0)
    assert (r["acked"], r["attempted"], r["delivered"], r["deliveries"], r["unconfirmed"]) == (3, 4, 3, 3, 0)


def test_an_acknowledged_job_never_delivered_is_lost():
    r = check(ATTEMPTED, ACKED, [("D-1", "a"), ("D-3", "c"), ("D-3", "c")])
    assert r["lost"] == ["D-2"]


def test_unexpected_deliveries_are_reported_and_not_counted_as_delivered():
    deliveries = [("D-1", "a"), ("D-2", "b"), ("D-3", "c"),
                  ("D-9", "never sent"),      # a body no producer sent
                  ("D-1", "b"),               # a known ID with another body
                  ("D-8", "c")]               # an acknowledged body under another ID
    r = check(ATTEMPTED, ACKED, deliveries)
    assert r["unexpected"] == sorted([("D-9", "never sent"), ("D-1", "b"), ("D-8", "c")])
    assert (r["lost"], r["delivered"], r["duplicates"]) == ([], 3, 0)


def test_duplicates_are_deliveries_beyond_the_first_as_a_percentage_of_jobs_delivered():
    deliveries = [("D-1", "a"), ("D-2", "b"), ("D-1", "a"), ("D-3", "c"), ("D-1", "a"), ("D-2", "b")]
    r = check(ATTEMPTED, ACKED, deliveries)
    assert (r["duplicates"], r["redelivered"]) == (3, {2: 1, 3: 1})
    assert r["duplicate_pct"] == 100.0
    assert r["lost"] == [] and r["unexpected"] == []


def test_a_job_whose_addjob_failed_may_be_delivered_without_being_unexpected():
    r = check(ATTEMPTED, ACKED, [("D-1", "a"), ("D-2", "b"), ("D-3", "c"), ("D-4", "d")])
    assert (r["unconfirmed"], r["unexpected"], r["delivered"]) == (1, [], 4)


def test_nothing_delivered():
    r = check(ATTEMPTED, ACKED, [])
    assert r["lost"] == ["D-1", "D-2", "D-3"] and r["duplicate_pct"] == 0.0


# The history of a failure seen on a clean clone (CPython): every job the
# drain gave up on was still held by the three nodes.  "Not delivered yet"
# is not "lost".
HELD_AT_THE_END = {"D-2": ["active", "active", "queued"]}


def test_a_job_a_node_still_holds_is_held_not_lost():
    r = check(ATTEMPTED, ACKED, [("D-1", "a"), ("D-3", "c")], HELD_AT_THE_END)
    assert r["lost"] == [] and r["held"] == {"D-2": ["active", "active", "queued"]}


def test_a_job_no_node_holds_any_more_is_lost():
    states = {"D-2": ["-", "-", "-"]}
    r = check(ATTEMPTED, ACKED, [("D-1", "a"), ("D-3", "c")], states)
    assert (r["lost"], r["held"]) == (["D-2"], {})
    # Known only as acknowledged (never delivered, so no client acked it: a
    # bug): nothing will deliver it either.
    r = check(ATTEMPTED, ACKED, [("D-1", "a"), ("D-3", "c")], {"D-2": ["acked", "-", "-"]})
    assert (r["lost"], r["held"]) == (["D-2"], {})


def test_a_node_that_could_not_say_keeps_the_job_from_being_called_lost():
    r = check(ATTEMPTED, ACKED, [("D-1", "a"), ("D-3", "c")], {"D-2": ["-", "?", "-"]})
    assert (r["lost"], r["held"]) == ([], {"D-2": ["-", "?", "-"]})


def test_the_drain_does_not_stop_while_the_cluster_holds_jobs():
    # The drain that failed: nothing delivered for 4 s (its old --idle),
    # one acknowledged job missing, three copies of it held.  It must go on.
    assert drain_over(elapsed=12, silent=4, missing=1, holding=3, quiet=2, bound=180) is None
    # Unknown (not asked this turn, or a node could not say): go on.
    assert drain_over(elapsed=12, silent=40, missing=1, holding=None, quiet=2, bound=180) is None
    # Deliveries still coming: go on, whatever is held.
    assert drain_over(elapsed=12, silent=1, missing=0, holding=0, quiet=2, bound=180) is None
    # Nothing held and quiet: over -- drained, or with jobs lost for good.
    assert drain_over(elapsed=12, silent=2, missing=0, holding=0, quiet=2, bound=180) == "drained"
    assert drain_over(elapsed=12, silent=2, missing=5, holding=0, quiet=2, bound=180) == "nothing held"
    # The bound: what is still held then is reported held.
    assert drain_over(elapsed=180, silent=30, missing=1, holding=3, quiet=2, bound=180) == "bound"


def phase(nemesis, guarantee, lost=(), crashes=(), tracebacks=None, unexpected=(), held=None):
    return {"nemesis": nemesis, "guarantee": guarantee, "crashes": list(crashes), "tracebacks": tracebacks or {},
            "drain_end": "bound", "result": {"lost": list(lost), "unexpected": list(unexpected), "held": held or {}}}


def test_the_verdict_fails_lost_jobs_only_where_the_guarantee_holds():
    from tests.tools.faults import verdict

    assert verdict(phase("stop", True)) == []
    assert verdict(phase("stop", True, lost=["D-1"])) == ["1 acknowledged jobs lost"]
    assert verdict(phase("kill", False, lost=["D-1"])) == []
    assert verdict(phase("kill", False, unexpected=[("D-1", "x")])) == ["1 unexpected deliveries"]
    assert verdict(phase("kill", False, crashes=[{"node": 0}])) == ["1 node crashes"]
    assert verdict(phase("kill", False, tracebacks={2: 1})) == ["tracebacks in node logs {2: 1}"]
    assert verdict({"nemesis": "partition", "skipped": "no iptables"}) == []


def test_jobs_held_at_the_drains_bound_fail_every_phase_apart_from_losses():
    from tests.tools.faults import verdict

    for guarantee in (True, False):
        assert verdict(phase("kill", guarantee, held=HELD_AT_THE_END)) == [
            "1 acknowledged jobs still held by the nodes, not delivered, when the drain ended (bound)"]


def test_a_power_cut_keeps_its_guarantee_under_appendfsync_always_only():
    from tests.tools.faults import parse_args, phase_setup

    for fsync, guarantee in (("always", True), ("everysec", False), ("no", False)):
        report, reason = phase_setup("power-cut", parse_args(["--appendfsync", fsync]))
        assert (report["guarantee"], reason) == (guarantee, None)
    report, reason = phase_setup("corrupt", parse_args(["--no-aof"]))
    assert reason == "a storage nemesis works on the AOF: not run with --no-aof"
    options = parse_args([])
    options.no_disk_reason = "tmpfs mounts need root (running as uid 1000)"
    assert phase_setup("disk-full-one", options)[1] == options.no_disk_reason
    assert phase_setup("kill-aof", options)[1] is None


def test_duplicates_across_a_kill_of_every_node_are_told_apart():
    from tests.tools.faults import across_kills

    kills = [10.0, 20.0]
    traces = [[(9.9, 0), (13.0, 1)],               # in flight at the kill at 10: given again after it
              [(9.9, 0), (13.0, 1), (13.5, 2)],    # twice after it
              [(11.0, 0), (12.0, 0)],              # both after the kill: another cause
              [(5.0, 0), (6.0, 1)],                # both before any kill
              [(19.0, 3), (25.0, 4)]]              # across the second kill
    assert across_kills(traces, kills) == 4
    assert across_kills(traces, []) == 0


def test_a_partition_that_cannot_be_made_is_skipped_with_its_reason(tmp_path):
    from tests.tools.faults import parse_args, run_phase, verdict

    options = parse_args(["--nemesis", "partition"])
    options.no_partition_reason = "iptables rules need root (running as uid 1000)"
    phase = run_phase("partition", options, 100, None, str(tmp_path))
    assert phase["skipped"] == options.no_partition_reason and verdict(phase) == []
    assert list(tmp_path.iterdir()) == []  # no cluster was started


def test_what_survives_a_power_cut_is_read_from_the_sync_log():
    from tests.tools.faultdisk import durable_state

    events = [["open", "1:10", "0", "/d/disque.aof"],
              ["fsync", "1:10", "100"],
              ["open", "1:11", "0", "/d/disque.aof.tmp"],
              ["fsync", "1:11", "40"],
              ["rename", "/d/disque.aof.tmp", "/d/disque.aof", "/d/disque.aof.saved"],
              ["open", "1:11", "40", "/d/disque.aof"],         # the new file, opened after the rename
              ["rename", "/d/nodes.conf.tmp", "/d/nodes.conf", "-"],
              ["fsync_dir", "/d"],                              # both renames durable
              ["rename", "/d/disque.aof.tmp2", "/d/disque.aof", "/d/disque.aof.saved2"],
              ["fsync", "1:11", "70"],
              ["fsync", "1:11", "60"]]                          # (a slower thread's, older size)
    synced, renames = durable_state(events)
    assert synced == {"1:10": 100, "1:11": 70}
    assert renames == [("/d/disque.aof.tmp2", "/d/disque.aof", "/d/disque.aof.saved2")]


def test_damage_to_a_file(tmp_path):
    import random

    from tests.tools.faultdisk import damage

    path = tmp_path / "f"
    data = bytes(range(256)) * 4
    for kind in ("tail", "middle", "flip"):
        path.write_bytes(data)
        done = damage(str(path), kind, random.Random(kind))
        now = path.read_bytes()
        if kind == "tail":
            assert len(data) - 200 <= done["cut_at"] == len(now) < len(data) and data.startswith(now)
        elif kind == "middle":
            assert len(data) // 4 <= done["cut_at"] == len(now) < 3 * len(data) // 4 and data.startswith(now)
        else:
            changed = [i for i in range(len(data)) if data[i] != now[i]]
            assert len(now) == len(data) and changed
            assert all(len(data) // 4 <= i < 3 * len(data) // 4 for i in changed)


def test_how_long_before_a_kill_the_lost_jobs_were_acknowledged():
    from tests.tools.faults import lost_before_kill

    # 9.2 and 9.9: before the kill at 10; 10.5: before the one at 20; 25.0:
    # after the last kill (not lost to a kill).
    assert lost_before_kill([9.2, 9.9, 10.5, 25.0], [10.0, 20.0]) == [9.5, 0.8, 0.1]


def test_without_root_the_full_disks_are_skipped_with_the_reason(monkeypatch):
    from tests.tools import faultdisk

    monkeypatch.setattr(faultdisk.os, "geteuid", lambda: 1000)
    assert faultdisk.unavailable() == "tmpfs mounts need root (running as uid 1000)"
