"""SCHEDULE on one node (docs/extensions.md): the command's replies and
errors, runs fired on the node's clock with their derived IDs and DEDUP
keys, PAUSE/RESUME, and the ACL categories of its subcommands.  The
cluster side is tests/sim/test_schedules_cluster.py."""

import pytest

from disque.core.recurring import run_id, run_key
from tests.support.memory import T0, Node


@pytest.fixture
def node(tmp_path):
    n = Node(tmp_path / "n", {})
    yield n
    n.service.stopService()


def fields(reply: bytes) -> dict:
    """A flat RESP array of bulk names and simple values, as a dict."""
    lines = reply.split(b"\r\n")
    out, i, key = {}, 1, None
    while i < len(lines) - 1:
        line = lines[i]
        if line.startswith(b"$-1"):
            value, i = None, i + 1
        elif line.startswith(b"$"):
            value, i = lines[i + 1], i + 2
        elif line.startswith(b":"):
            value, i = int(line[1:]), i + 1
        elif line.startswith(b"*"):
            n = int(line[1:])
            value, i = [int(x[1:]) for x in lines[i + 1:i + 1 + n]], i + 1 + n
        if key is None:
            key = value
        else:
            out[key] = value
            key = None
    return out


def test_add_show_list_pause_resume_del(node):
    c = node.connect()
    assert c.call("SCHEDULE", "ADD", "tick", "q", "hello", "EVERY", "1000", "REPLICATE", "1", "TTL", "60") == b"+OK\r\n"
    assert c.call("SCHEDULE", "LIST") == b"*1\r\n$4\r\ntick\r\n"
    node.advance(3.5)
    shown = fields(c.call("SCHEDULE", "SHOW", "tick"))
    assert shown[b"when"] == b"every 1000 ms" and shown[b"state"] == b"active" and shown[b"queue"] == b"q"
    assert shown[b"runs"] == shown[b"fired-here"] == 3 and shown[b"skipped"] == 0
    first = int(T0 * 1000) + 1000
    assert shown[b"last-fire"] == first + 2000
    assert shown[b"next"] == [first + 3000, first + 4000, first + 5000]
    version = shown[b"version"]
    assert c.call("QLEN", "q") == b":3\r\n"
    got = c.call("GETJOB", "FROM", "q").split(b"\r\n")
    assert got[5] == run_id(b"tick", version, first, 60, 6) and got[7] == b"hello"
    show = c.call("SHOW", got[5])
    assert run_key(b"tick", first) in show  # the run's DEDUP key: which schedule, which time
    assert c.call("ACKJOB", got[5]) == b":1\r\n"
    assert c.call("SCHEDULE", "PAUSE", "tick") == b"+OK\r\n"
    node.advance(3)
    assert c.call("QLEN", "q") == b":2\r\n" and fields(c.call("SCHEDULE", "SHOW", "tick"))[b"state"] == b"paused"
    assert c.call("SCHEDULE", "RESUME", "tick") == b"+OK\r\n"
    node.advance(1.2)
    assert c.call("QLEN", "q") == b":3\r\n"  # what was due while paused is not owed: one new run
    assert c.call("SCHEDULE", "DEL", "tick") == b":1\r\n"
    assert c.call("SCHEDULE", "DEL", "tick") == b":0\r\n"
    node.advance(2)
    assert c.call("QLEN", "q") == b":3\r\n" and c.call("SCHEDULE", "LIST") == b"*0\r\n"
    assert c.call("SCHEDULE", "SHOW", "tick") == b"-ERR no such schedule\r\n"


def test_cron_schedules_show_their_next_runs(node):
    c = node.connect()
    assert c.call("SCHEDULE", "ADD", "daily", "q", "x", "CRON", "0 9 * * *", "TZ", "Europe/Paris",
                  "CATCHUP", "one", "PRIORITY", "7") == b"+OK\r\n"
    shown = fields(c.call("SCHEDULE", "SHOW", "daily", "NEXT", "2"))
    assert shown[b"when"] == b"cron 0 9 * * * Europe/Paris" and shown[b"catchup"] == b"one"
    nxt = shown[b"next"]
    assert len(nxt) == 2 and nxt[1] - nxt[0] == 86_400_000 and shown[b"last-fire"] is None


@pytest.mark.parametrize("args, error", [
    (["ADD", "s", "q", "b"], b"-ERR Wrong number of arguments for SCHEDULE ADD"),
    (["ADD", "s", "q", "b", "TTL", "5"], b"-ERR SCHEDULE ADD needs CRON"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "CRON", "* * * * *"], b"-ERR SCHEDULE ADD needs CRON"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "TZ", "UTC"], b"-ERR SCHEDULE ADD needs CRON"),
    (["ADD", "s", "q", "b", "EVERY", "5"], b"-ERR EVERY must be between 10 and"),
    (["ADD", "s", "q", "b", "EVERY", "x"], b"-ERR EVERY must be between 10 and"),
    (["ADD", "s", "q", "b", "CRON", "61 * * * *"], b"-ERR invalid CRON expression"),
    (["ADD", "s", "q", "b", "CRON", "* * *"], b"-ERR CRON needs 5 fields"),
    (["ADD", "s", "q", "b", "CRON", "* * * * *", "TZ", "Nowhere/Else"], b"-ERR unknown time zone"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "CATCHUP", "some"], b"-ERR CATCHUP must be skip, one or all"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "ASYNC"], b"-ERR ASYNC and DEDUP are not options"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "DEDUP", "k"], b"-ERR ASYNC and DEDUP are not options"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "TTL", "0"], b"-ERR TTL must be a number > 0"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "TTL", "5", "DELAY", "5"], b"-ERR The specified DELAY is greater"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "REPLICATE", "2", "RETRY", "0"], b"-ERR With RETRY set to 0"),
    (["ADD", "s", "q", "b", "EVERY", "1000", "BOGUS"], b"-ERR syntax error"),
    (["ADD", "s" * 201, "q", "b", "EVERY", "1000"], b"-ERR schedule name must be 1 to 200 bytes"),
    (["PAUSE", "nope"], b"-ERR no such schedule"),
    (["SHOW", "nope"], b"-ERR no such schedule"),
    (["SHOW", "s", "NEXT"], b"-ERR Wrong number of arguments for SCHEDULE SHOW"),
    (["LIST", "x"], b"-ERR Wrong number of arguments for SCHEDULE LIST"),
    (["FIRE", "s"], b"-ERR Unknown SCHEDULE subcommand 'FIRE'"),
])
def test_bad_input_gets_an_error_and_changes_nothing(node, args, error):
    c = node.connect()
    assert c.call("SCHEDULE", *args).startswith(error)
    assert c.call("SCHEDULE", "LIST") == b"*0\r\n"


def test_show_next_is_bounded(node):
    c = node.connect()
    c.call("SCHEDULE", "ADD", "s", "q", "b", "EVERY", "1000")
    assert c.call("SCHEDULE", "SHOW", "s", "NEXT", "0").startswith(b"-ERR NEXT must be between 1 and 100")
    assert c.call("SCHEDULE", "SHOW", "s", "LAST", "2") == b"-ERR syntax error\r\n"


def test_acl_inspect_users_read_schedules_and_manage_users_change_them(node):
    c = node.connect()
    assert c.call("ACL", "SETUSER", "viewer", "on", ">pw", "+@inspect", "~*") == b"+OK\r\n"
    assert c.call("ACL", "SETUSER", "ops", "on", ">pw", "+@manage", "+@inspect", "~jobs:*") == b"+OK\r\n"
    c.call("SCHEDULE", "ADD", "s", "jobs:a", "b", "EVERY", "1000")
    v = node.connect()
    assert v.call("AUTH", "viewer", "pw") == b"+OK\r\n"
    assert v.call("SCHEDULE", "LIST") == b"*1\r\n$1\r\ns\r\n"
    assert v.call("SCHEDULE", "DEL", "s").startswith(b"-NOPERM")
    o = node.connect()
    assert o.call("AUTH", "ops", "pw") == b"+OK\r\n"
    assert o.call("SCHEDULE", "ADD", "t", "other", "b", "EVERY", "1000").startswith(b"-NOPERM")  # its queue
    assert o.call("SCHEDULE", "ADD", "t", "jobs:b", "b", "EVERY", "1000") == b"+OK\r\n"


def test_info_shows_schedules_once_there_is_one(node):
    c = node.connect()
    assert b"# Schedules" not in c.call("INFO")  # the original's INFO without them
    c.call("SCHEDULE", "ADD", "s", "q", "b", "EVERY", "1000", "REPLICATE", "1")
    node.advance(2.5)
    info = c.call("INFO").decode()
    assert "# Schedules\r\nschedules:1\r\nschedules_paused:0\r\nschedule_runs_fired:2\r\n" in info
    assert "schedules_settled:1" in info and "catalog_entries:2" in info  # the schedule and its progress
    assert c.call("INFO", "schedules").startswith(b"$")


def test_metrics_show_each_schedule_once_there_is_one(node):
    from disque.http import metrics
    assert b"disque_schedule" not in metrics.render(node.runtime)
    c = node.connect()
    c.call("SCHEDULE", "ADD", "s", "q", "b", "EVERY", "1000", "REPLICATE", "1")
    c.call("SCHEDULE", "ADD", "hidden", "other", "b", "EVERY", "1000", "REPLICATE", "1")
    node.advance(2.5)
    text = metrics.render(node.runtime, lambda queue: queue == b"q").decode()
    last = int(T0 * 1000) + 2000
    for line in ("disque_schedules 2", "disque_schedules_settled 1", "disque_schedule_runs_skipped_total 0",
                 'disque_schedule_runs_fired_total{schedule="s"} 2', 'disque_schedule_runs{schedule="s"} 2',
                 'disque_schedule_last_run_timestamp_seconds{schedule="s"} %r' % (last / 1000.0),
                 'disque_schedule_next_run_timestamp_seconds{schedule="s"} %r' % ((last + 1000) / 1000.0),
                 'disque_schedule_paused{schedule="s"} 0'):
        assert "\n" + line + "\n" in text, line
    assert 'schedule="hidden"' not in text  # a user limited to queue q sees its schedules only


def test_qstat_names_the_schedules_of_a_queue_only_when_it_has_some(node):
    c = node.connect()
    c.call("ADDJOB", "q", "x", "0")
    plain = c.call("QSTAT", "q")
    assert b"schedules" not in plain
    c.call("SCHEDULE", "ADD", "b", "q", "x", "EVERY", "60000")
    c.call("SCHEDULE", "ADD", "a", "q", "x", "EVERY", "60000")
    c.call("SCHEDULE", "ADD", "other", "elsewhere", "x", "EVERY", "60000")
    assert c.call("QSTAT", "q") == plain[:1] + b"%d" % (int(plain[1:plain.index(b"\r\n")]) + 2) + \
        plain[plain.index(b"\r\n"):] + b"$9\r\nschedules\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"


def test_a_tenant_sees_and_changes_the_schedules_of_its_queues_only(node):
    c = node.connect()
    assert c.call("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~a:*") == b"+OK\r\n"
    c.call("SCHEDULE", "ADD", "mine", "a:q", "x", "EVERY", "60000")
    c.call("SCHEDULE", "ADD", "theirs", "b:q", "x", "EVERY", "60000")
    a = node.connect()
    assert a.call("AUTH", "alice", "pw") == b"+OK\r\n"
    assert a.call("SCHEDULE", "LIST") == b"*1\r\n$4\r\nmine\r\n"
    for args in (["SHOW", "theirs"], ["DEL", "theirs"], ["PAUSE", "theirs"], ["RESUME", "theirs"],
                 ["ADD", "theirs", "a:q", "y", "EVERY", "1000"]):  # replacing it would take it over
        assert a.call("SCHEDULE", *args) == b"-NOPERM No permissions to access a queue\r\n", args
    assert fields(c.call("SCHEDULE", "SHOW", "theirs"))[b"queue"] == b"b:q"  # unchanged
    assert a.call("SCHEDULE", "PAUSE", "mine") == b"+OK\r\n"
    assert b"b:q" in c.call("ACL", "LOG")
