"""The golden replay's engine and tables, without a node: the comparisons
can fail (a changed byte, field or state is a MISMATCH, a known difference
that matches the original again is one too), and every table entry names a
block, prose line or file the transcripts have, so no entry is stale.

The replayer is built offline (``offline``): its identities are fixed
instead of learned from a node, and replies are handed to ``compare`` as if
they had been read from one."""

import time

import pytest

from tests.support.golden.known import KNOWN_CHECKS, KNOWN_DIFFERENCES, KNOWN_SCAN_MISSING, RACES, known_key
from tests.support.golden.normalize import check_cluster_nodes, command_order
from tests.support.golden.replayer import Replayer
from tests.support.golden.resp import encode, field, parse_replies, set_field, split_requests
from tests.support.golden.scenario import BEFORE, EXPECTED_ADJUST, PRELUDE, PROSE_ACTIONS, WAKE, before_key_lookup
from tests.support.golden.transcript import FILES, parse_file

OUR_ID = b"0123456789abcdef0123456789abcdef01234567"


class _Node:
    workdir = "/tmp/our-node"


def offline(file):
    """A Replayer for ``file`` with fixed identities and no node."""
    r = Replayer.__new__(Replayer)
    r.file = file
    r.idmap, r.anon, r.node_ids, r.ports, r.conns = {}, set(), {}, {}, {}
    r.results, r.known_used = [], set()
    r.my_id, r.port, r.node, r.main_addr = OUR_ID, 7000, _Node(), None
    r.current_node = "main"
    r.command_order = command_order()
    return r


def block(file, command):
    return next(b for b in parse_file(file) if b.command == command)


def replay_reply(r, b, raw):
    """Classify ``raw`` as our reply to block ``b``: its Result."""
    sent = r.map_sent(b)
    r.compare(b, sent, raw, parse_replies(raw), split_requests(sent), [])
    return r.results[-1]


def test_the_original_reply_with_our_identities_is_exact_and_one_byte_less_is_not():
    r = offline("jobs.md")
    b = block("jobs.md", "SHOW D-33f36033-15Lx8Ub/P9S2NnvDQzSAAMUD-000b")
    values, expected = r.expected(b)
    assert OUR_ID in expected and b"33f36033a560e0980d7d71c8fc8c0db81156cc5e" not in expected
    assert replay_reply(r, b, expected).status == "exact"

    err = block("errors.md", "FOO")
    assert replay_reply(offline("errors.md"), err, err.reply).status == "exact"
    changed = replay_reply(offline("errors.md"), err, err.reply.replace(b"FOO", b"BAR"))
    assert (changed.status, changed.detail) == ("MISMATCH", "differs")


def test_a_job_record_is_normalized_in_its_varying_fields_only():
    r = offline("jobs.md")
    b = block("jobs.md", "SHOW D-33f36033-15Lx8Ub/P9S2NnvDQzSAAMUD-000b")
    (exp,), _ = r.expected(b)
    ours = set_field(exp, b"ctime", (":", int(time.time() * 1000) * 1_000_000))
    ours = set_field(ours, b"ttl", (":", field(exp, b"ttl")[1] - 1))
    assert replay_reply(r, b, encode(ours)).status == "normalized"

    for key, value in ((b"state", ("$", b"acked")), (b"queue", ("$", b"otherq")),
                       (b"ttl", (":", field(exp, b"ttl")[1] - 10)),
                       (b"nodes-delivered", ("*", [("$", b"f" * 40)]))):
        res = replay_reply(offline("jobs.md"), b, encode(set_field(ours, key, value)))
        assert res.status == "MISMATCH", key
        assert key.decode() in res.detail


def test_a_known_difference_is_checked_and_may_not_match_the_original():
    key = "admin.md: DEBUG STRUCTSIZE"
    b = block("admin.md", "DEBUG STRUCTSIZE")
    assert known_key(b) == key and key in KNOWN_CHECKS and key not in RACES
    assert replay_reply(offline("admin.md"), b, b"$14\r\nbits:64 job:99\r\n").status == "known"
    assert replay_reply(offline("admin.md"), b, b"+OK\r\n").status == "MISMATCH"
    stale = replay_reply(offline("admin.md"), b, b.reply)
    assert stale.status == "MISMATCH" and "but matches the original" in stale.detail


def test_cluster_nodes_lines_compare_as_a_set_and_nothing_else_varies():
    now = b"%d" % (time.time() * 1000)
    exp = ("$", b"a" * 40 + b" 127.0.0.1:7912 myself 0 0 connected\n"
           + b"b" * 40 + b" 127.0.0.1:7913 noflags 0 1440000000000 connected\n")
    ours = ("$", b"b" * 40 + b" 127.0.0.1:7913 noflags 0 " + now + b" connected\n"
            + b"a" * 40 + b" 127.0.0.1:7912 myself 0 0 connected\n")
    assert check_cluster_nodes(exp, ours, None) == []
    assert check_cluster_nodes(exp, ("$", ours[1].replace(b"noflags", b"fail")), None)
    assert check_cluster_nodes(exp, ("$", ours[1].replace(now, b"1440000000000")), None)


# -- the tables --------------------------------------------------------------

def all_blocks():
    return [b for f, stop_at in FILES for b in parse_file(f, stop_at=stop_at)]


def test_every_known_difference_names_a_block():
    assert set(KNOWN_CHECKS) | RACES | set(KNOWN_SCAN_MISSING) <= set(KNOWN_DIFFERENCES)
    used = {known_key(b) for b in all_blocks()}
    blocks_keys = {k for k in KNOWN_DIFFERENCES if not k.startswith("INFO field ")}
    assert blocks_keys - used == set()


def test_every_scenario_entry_names_a_block_a_prose_line_or_a_file():
    blocks = all_blocks()
    for table in (BEFORE, EXPECTED_ADJUST):
        hit = {key for key, entry in table.items() for b in blocks
               if b.file == key[0] and before_key_lookup(table, b) is entry}
        assert set(table) - hit == set()
    assert set(WAKE) <= {(b.file, b.title) for b in blocks}
    assert set(PROSE_ACTIONS) <= {line for b in blocks for line in b.prose}
    assert set(PRELUDE) <= {f for f, _ in FILES}


@pytest.mark.parametrize("table", ["BEFORE", "WAKE", "PROSE_ACTIONS"])
def test_a_stale_table_entry_is_found(table, monkeypatch):
    """The table checks can fail: an entry naming no block is reported."""
    import tests.support.golden.scenario as scenario
    import sys
    me = sys.modules[__name__]

    entries = dict(getattr(scenario, table))
    stale = {"BEFORE": ("jobs.md", "no such title"), "WAKE": ("jobs.md", "no such title"),
             "PROSE_ACTIONS": "no such prose line"}[table]
    entries[stale] = ("nothing", lambda r: None)
    monkeypatch.setattr(me, table, entries)
    with pytest.raises(AssertionError):
        test_every_scenario_entry_names_a_block_a_prose_line_or_a_file()
