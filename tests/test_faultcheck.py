"""The fault suite's checker (tools/faultcheck.py) on synthetic histories:
it finds each kind of fault it reports, and nothing on a clean history;
and the suite's verdict fails a phase for exactly what its guarantee
covers."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

from faultcheck import check  # noqa: E402

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


def phase(nemesis, guarantee, lost=(), crashes=(), tracebacks=None, unexpected=()):
    return {"nemesis": nemesis, "guarantee": guarantee, "crashes": list(crashes), "tracebacks": tracebacks or {},
            "result": {"lost": list(lost), "unexpected": list(unexpected)}}


def test_the_verdict_fails_lost_jobs_only_where_the_guarantee_holds():
    from faults import verdict

    assert verdict(phase("stop", True)) == []
    assert verdict(phase("stop", True, lost=["D-1"])) == ["1 acknowledged jobs lost"]
    assert verdict(phase("kill", False, lost=["D-1"])) == []
    assert verdict(phase("kill", False, unexpected=[("D-1", "x")])) == ["1 unexpected deliveries"]
    assert verdict(phase("kill", False, crashes=[{"node": 0}])) == ["1 node crashes"]
    assert verdict(phase("kill", False, tracebacks={2: 1})) == ["tracebacks in node logs {2: 1}"]
    assert verdict({"nemesis": "partition", "skipped": "no iptables"}) == []


def test_duplicates_across_a_kill_of_every_node_are_told_apart():
    from faults import across_kills

    kills = [10.0, 20.0]
    traces = [[(9.9, 0), (13.0, 1)],               # in flight at the kill at 10: given again after it
              [(9.9, 0), (13.0, 1), (13.5, 2)],    # twice after it
              [(11.0, 0), (12.0, 0)],              # both after the kill: another cause
              [(5.0, 0), (6.0, 1)],                # both before any kill
              [(19.0, 3), (25.0, 4)]]              # across the second kill
    assert across_kills(traces, kills) == 4
    assert across_kills(traces, []) == 0


def test_a_partition_that_cannot_be_made_is_skipped_with_its_reason(tmp_path):
    from faults import parse_args, run_phase, verdict

    options = parse_args(["--nemesis", "partition"])
    options.no_partition_reason = "iptables rules need root (running as uid 1000)"
    phase = run_phase("partition", options, 100, None, str(tmp_path))
    assert phase["skipped"] == options.no_partition_reason and verdict(phase) == []
    assert list(tmp_path.iterdir()) == []  # no cluster was started
