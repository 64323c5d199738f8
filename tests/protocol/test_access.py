"""Access in memory (RespProtocol on string transports, a task.Clock):
protected mode, ``enable-debug-command``, no secret in MONITOR or the slow
log, the audit lines, and failed AUTHs slowed then refused
(disque.access.protection, disque.commands.redact, disque.commands.audit,
disque.access.failed_auth)."""

import ipaddress

import pytest
from hypothesis import given, strategies as st
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress

from disque.access import failed_auth
from disque.commands.redact import REDACTED, redacted
from disque.config import SPECS, is_secret
from disque.access.failed_auth import BLOCK_AFTER, MAX_DELAY, Throttle
from disque.access.protection import DEBUG_NOT_ALLOWED, DENIED, is_local, is_loopback
from tests.support.memory import captured_log, cmd, connect, make_runtime, take, texts

STRANGER = IPv4Address("TCP", "10.1.2.3", 40000)
WRONG = b"-ERR invalid password\r\n"


# -- is_loopback, is_local ------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "127.255.0.9", "::1", "::ffff:127.0.0.1", "::ffff:127.1.2.3",
                                  b"127.0.0.1", b"::1", "0:0:0:0:0:0:0:1"])
def test_loopback_addresses(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", ["10.0.0.1", "128.0.0.1", "126.255.255.255", "0.0.0.0", "::", "::2",
                                  "::ffff:10.0.0.1", "::127.0.0.1", "fe80::1", "localhost", "", "?",
                                  "127.0.0.1:80", "127.0.0.1 ", "127.0.0.256", b"\xff\xfe", None, "1" * 500])
def test_not_loopback(host):
    assert not is_loopback(host)


@given(st.integers(0, 2 ** 32 - 1))
def test_an_ipv4_address_is_loopback_exactly_in_127_0_0_0_8(n):
    ip = ipaddress.IPv4Address(n)
    expected = n >> 24 == 127
    assert is_loopback(str(ip)) is expected
    assert is_loopback(str(ip).encode()) is expected
    assert is_loopback("::ffff:" + str(ip)) is expected  # mapped: the same answer


@given(st.integers(0, 2 ** 128 - 1))
def test_an_ipv6_address_is_loopback_if_it_is_1_or_a_mapped_127(n):
    ip = ipaddress.IPv6Address(n)
    mapped = n >> 32 == 0xFFFF
    assert is_loopback(str(ip)) is (n == 1 or (mapped and (n >> 24) & 0xFF == 127))
    assert is_loopback(ip.exploded) is is_loopback(str(ip))


@given(st.one_of(st.text(), st.binary()))
def test_anything_else_is_answered_without_an_error(host):
    assert is_loopback(host) in (True, False)


def test_a_unix_socket_is_local_and_so_is_loopback():
    assert is_local(UNIXAddress(None)) and is_local(UNIXAddress(b"/tmp/disque.sock"))
    assert is_local(IPv6Address("TCP", "::1", 5000)) and is_local(IPv4Address("TCP", "127.0.0.1", 5000))
    assert not is_local(STRANGER) and not is_local(IPv6Address("TCP", "2001:db8::1", 5000))
    assert not is_local(object())  # an address of no known kind: not trusted


# -- protected mode ------------------------------------------------------------

def test_a_client_beyond_loopback_gets_denied_and_is_closed():
    runtime, _ = make_runtime()
    with captured_log() as events:
        proto, tr = connect(runtime, STRANGER)
        connect(runtime, STRANGER)  # a second one within the minute: counted, not logged
    assert take(tr) == DENIED
    assert tr.disconnecting and proto.client is None and not runtime.ctx.clients
    proto.dataReceived(cmd("PING"))  # anything it had sent already is ignored
    assert take(tr) == b""
    assert [t for t in texts(events) if "Refused" in t] == [
        "Refused client from 10.1.2.3: protected mode is enabled and no password is set for the default user"]
    stats = runtime.ctx.stats
    assert stats.rejected == 2 and stats.connections == 2


def test_denied_is_redis_7s_text_about_disque():
    assert DENIED.startswith(b"-DENIED Disque is running in protected mode because protected mode is enabled "
                             b"and no password is set for the default user.")
    assert b"Redis" not in DENIED and DENIED.count(b"\r\n") == 1 and DENIED.endswith(b"\r\n")
    assert all(b"%d) " % n in DENIED for n in (1, 2, 3, 4))


@pytest.mark.parametrize("peer", [IPv4Address("TCP", "127.0.0.1", 1), IPv4Address("TCP", "127.9.9.9", 1),
                                  IPv6Address("TCP", "::1", 1), IPv6Address("TCP", "::ffff:127.0.0.1", 1),
                                  UNIXAddress(None)])
def test_local_clients_are_served(peer):
    runtime, _ = make_runtime()
    proto, tr = connect(runtime, peer)
    proto.dataReceived(cmd("PING"))
    assert take(tr) == b"+PONG\r\n" and not tr.disconnecting
    assert proto.client.local


def test_a_password_or_protected_mode_no_lets_strangers_in():
    runtime, _ = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime, STRANGER)
    proto.dataReceived(cmd("PING") + cmd("AUTH", "s3cret") + cmd("PING"))
    assert take(tr) == b"-NOAUTH Authentication required.\r\n+OK\r\n+PONG\r\n"
    assert not proto.client.local

    runtime, _ = make_runtime(**{"protected-mode": "no"})
    proto, tr = connect(runtime, STRANGER)
    proto.dataReceived(cmd("PING"))
    assert take(tr) == b"+PONG\r\n"


def test_config_set_applies_to_the_next_connections():
    runtime, _ = make_runtime()
    admin, atr = connect(runtime)
    admin.dataReceived(cmd("CONFIG", "SET", "protected-mode", "no"))
    assert take(atr) == b"+OK\r\n"
    stranger, tr = connect(runtime, STRANGER)
    admin.dataReceived(cmd("CONFIG", "SET", "protected-mode", "yes"))
    stranger.dataReceived(cmd("PING"))  # in before the change: stays
    assert take(tr) == b"+PONG\r\n"
    _, tr = connect(runtime, STRANGER)
    assert take(tr) == DENIED
    admin.dataReceived(cmd("CONFIG", "SET", "requirepass", "pw") + cmd("AUTH", "pw"))
    _, tr = connect(runtime, STRANGER)  # the default user has a password now
    assert take(tr) == b""
    admin.dataReceived(cmd("CONFIG", "GET", "protected-mode"))
    assert take(atr).endswith(b"$14\r\nprotected-mode\r\n$3\r\nyes\r\n")


def test_a_password_the_acl_gives_the_default_user_lifts_it():
    runtime, _ = make_runtime()
    admin, atr = connect(runtime)
    admin.dataReceived(cmd("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*"))
    _, tr = connect(runtime, STRANGER)  # another user's password changes nothing
    assert take(tr) == DENIED
    admin.dataReceived(cmd("ACL", "SETUSER", "default", ">pw"))
    assert take(atr) == b"+OK\r\n+OK\r\n"
    stranger, tr = connect(runtime, STRANGER)
    stranger.dataReceived(cmd("AUTH", "alice", "pw") + cmd("PING"))
    assert take(tr) == b"+OK\r\n+PONG\r\n"


# -- enable-debug-command -------------------------------------------------------

def _debug_reply(peer, **directives):
    runtime, _ = make_runtime(**{"protected-mode": "no", **directives})
    proto, tr = connect(runtime, peer)
    proto.dataReceived(cmd("DEBUG", "JOBS"))
    return take(tr)


@pytest.mark.parametrize("mode, peer, allowed", [
    ("local", IPv4Address("TCP", "127.0.0.1", 1), True), ("local", UNIXAddress(None), True),
    ("local", IPv6Address("TCP", "::1", 1), True), ("local", STRANGER, False),
    ("no", IPv4Address("TCP", "127.0.0.1", 1), False), ("no", UNIXAddress(None), False),
    ("yes", STRANGER, True), ("yes", IPv4Address("TCP", "127.0.0.1", 1), True),
])
def test_debug_runs_where_enable_debug_command_allows(mode, peer, allowed):
    assert _debug_reply(peer, **{"enable-debug-command": mode}) == (b":0\r\n" if allowed else DEBUG_NOT_ALLOWED)


def test_debug_is_local_by_default_and_not_settable():
    assert _debug_reply(STRANGER) == DEBUG_NOT_ALLOWED
    runtime, _ = make_runtime()
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("CONFIG", "SET", "enable-debug-command", "yes") + cmd("DEBUG", "JOBS"))
    assert take(tr) == b"-ERR Unsupported CONFIG parameter: enable-debug-command\r\n:0\r\n"
    assert DEBUG_NOT_ALLOWED == (b'-ERR DEBUG command not allowed. If the enable-debug-command option is set to '
                                 b'"local", you can run it from a local connection, otherwise you need to set '
                                 b'this option in the configuration file, and then restart the server.\r\n')


# -- MONITOR and SLOWLOG redact secrets ------------------------------------------------

def monitored(runtime, *commands, password=None):
    """The MONITOR lines ``commands`` make, sent by a new connection, and
    their replies.  The monitor authenticates with ``password`` first."""
    monitor, mtr = connect(runtime)
    monitor.dataReceived((cmd("AUTH", password) if password else b"") + cmd("MONITOR"))
    assert take(mtr).endswith(b"+OK\r\n")
    proto, tr = connect(runtime)
    proto.dataReceived(b"".join(cmd(*c) for c in commands))
    lines = [line.split(b"] ", 1)[1] for line in take(mtr).split(b"\r\n") if line]
    return lines, take(tr)


def test_monitor_never_shows_an_auth_password():
    runtime, _ = make_runtime(requirepass="pw1")
    lines, replies = monitored(runtime, ("AUTH", "wrong-pw"), ("AUTH", "pw1"), ("AUTH", "default", "pw1"),
                               ("PING", "pw1-is-no-secret-here"), password="pw1")
    assert replies == WRONG + b"+OK\r\n+OK\r\n$21\r\npw1-is-no-secret-here\r\n"
    assert lines == [b'"AUTH" "(redacted)"', b'"AUTH" "(redacted)"', b'"AUTH" "(redacted)" "(redacted)"',
                     b'"PING" "pw1-is-no-secret-here"']


def test_monitor_never_shows_a_secret_directive_set():
    runtime, _ = make_runtime()
    lines, replies = monitored(runtime, ("CONFIG", "SET", "cluster-password", "topsecret-bus"),
                               ("config", "set", "REQUIREPASS", "topsecret-pw"),
                               ("CONFIG", "SET", "maxmemory", "100mb"), ("CONFIG", "GET", "requirepass"))
    assert replies.startswith(b"+OK\r\n+OK\r\n")
    assert lines[:3] == [b'"CONFIG" "SET" "cluster-password" "(redacted)"',
                         b'"config" "set" "REQUIREPASS" "(redacted)"', b'"CONFIG" "SET" "maxmemory" "100mb"']
    assert b"topsecret" not in b"".join(lines)


def test_a_renamed_command_is_redacted_by_what_it_is():
    runtime, _ = make_runtime(**{"rename-command": "CONFIG cfg"})
    lines, replies = monitored(runtime, ("cfg", "SET", "requirepass", "hidden"))
    assert replies == b"+OK\r\n" and lines == [b'"cfg" "SET" "requirepass" "(redacted)"']


def test_monitor_never_shows_acl_setuser_rules():
    runtime, _ = make_runtime()
    lines, replies = monitored(runtime, ("ACL", "SETUSER", "alice", "on", ">alice-pw", "~a:*", "+@all"),
                               ("ACL", "WHOAMI"))
    assert replies.startswith(b"+OK\r\n")
    assert lines == [b'"ACL" "SETUSER" "alice" "(redacted)" "(redacted)" "(redacted)" "(redacted)"',
                     b'"ACL" "WHOAMI"']


def test_redaction_rules():
    assert redacted(b"auth", [b"AUTH", b"u", b"p"]) == [b"AUTH", REDACTED, REDACTED]
    assert redacted(b"acl", [b"ACL", b"SETUSER", b"bob"]) == [b"ACL", b"SETUSER", b"bob"]
    assert redacted(b"acl", [b"ACL", b"DELUSER", b"bob", b"x"]) == [b"ACL", b"DELUSER", b"bob", b"x"]
    assert redacted(b"config", [b"CONFIG", b"SET", b"requirepass"]) == [b"CONFIG", b"SET", b"requirepass"]
    multi = [b"CONFIG", b"SET", b"maxmemory", b"1gb", b"cluster-password", b"x", b"hz", b"10"]
    assert redacted(b"config", multi) == multi[:5] + [REDACTED, b"hz", b"10"]
    argv = [b"CLUSTER", b"MEET", b"127.0.0.1", b"7712"]
    assert redacted(b"cluster", argv) is argv  # nothing to hide: the same list, no copy


def test_every_directive_that_says_pass_is_secret():
    for spec in SPECS:
        assert is_secret(spec.name.encode()) == ("pass" in spec.name), spec.name
    assert is_secret(b"RequirePass")


def test_the_slow_log_never_shows_a_secret():
    runtime, _ = make_runtime(requirepass="pw1", **{"slowlog-log-slower-than": "0"})
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("AUTH", "pw1") + cmd("CONFIG", "SET", "cluster-password", "topsecret-bus")
                       + cmd("AUTH", "default", "pw1") + cmd("SLOWLOG", "GET"))
    log = take(tr)
    assert b"pw1" not in log and b"topsecret" not in log
    assert b"$4\r\nAUTH\r\n$10\r\n(redacted)\r\n" in log
    assert b"$16\r\ncluster-password\r\n$10\r\n(redacted)\r\n" in log
    assert b"$4\r\nAUTH\r\n$10\r\n(redacted)\r\n$10\r\n(redacted)\r\n" in log


# -- audit lines ---------------------------------------------------------------------

def audited(runtime, *commands, peer=None):
    proto, tr = connect(runtime, *([peer] if peer else []))
    with captured_log() as events:
        proto.dataReceived(b"".join(cmd(*c) for c in commands))
    take(tr)
    return [t for e, t in zip(events, texts(events)) if e.get("log_namespace") == "disque.audit"]


def test_admin_commands_are_audited_with_user_and_address(tmp_path):
    runtime, _ = make_runtime(**{"protected-mode": "no"})
    runtime.config.path = str(tmp_path / "disque.conf")
    lines = audited(runtime, ("CONFIG", "SET", "maxmemory", "100mb"), ("CONFIG", "SET", "requirepass", "pw"),
                    ("AUTH", "pw"), ("CONFIG", "SET", "maxmemory", "x"), ("CONFIG", "REWRITE"),
                    ("CONFIG", "RESETSTAT"), ("CONFIG", "GET", "hz"), ("CLUSTER", "MEET", "127.0.0.1", "7712"),
                    ("CLUSTER", "RESET", "SOFT"), ("CLIENT", "KILL", "ID", "999"), ("BGREWRITEAOF",),
                    ("DEBUG", "JOBS"), ("PING",), peer=IPv4Address("TCP", "127.0.0.1", 5555))
    who = "default from 127.0.0.1:5555: "
    assert lines == [who + l for l in (
        '"CONFIG" "SET" "maxmemory" "100mb"', '"CONFIG" "SET" "requirepass" "(redacted)"',
        '"CONFIG" "REWRITE"', '"CONFIG" "RESETSTAT"', '"CLUSTER" "MEET" "127.0.0.1" "7712"',
        '"CLUSTER" "RESET" "SOFT"', '"CLIENT" "KILL" "ID" "999" (answered :0)', '"BGREWRITEAOF"',
        '"DEBUG" "JOBS"')]


def test_refused_debug_and_shutdown_are_audited():
    runtime, _ = make_runtime(**{"protected-mode": "no"})
    lines = audited(runtime, ("DEBUG", "FLUSHALL"), peer=STRANGER)
    assert lines == ['default from 10.1.2.3:40000: "DEBUG" "FLUSHALL" (refused: enable-debug-command is local)']
    assert audited(runtime, ("SHUTDOWN", "NOSAVE")) == ['default from 127.0.0.1:54321: "SHUTDOWN" "NOSAVE"']


def test_cluster_forget_is_audited_and_refused_changes_are_not():
    runtime, _ = make_runtime()
    cluster = runtime.node.cluster
    cluster.meet(b"127.0.0.1", 7712, runtime.node.now, explicit=True)
    [target] = [n.id for n in cluster.nodes.values() if n is not cluster.myself]
    lines = audited(runtime, ("CLUSTER", "FORGET", target), ("CLUSTER", "FORGET", target),
                    ("CONFIG", "SET", "hz", "fast"), ("CONFIG", "SET", "dedup-window", "5\nforged"))
    assert lines == ['default from 127.0.0.1:54321: "CLUSTER" "FORGET" "%s"' % target.decode()]


def test_an_audited_value_cannot_forge_a_line():
    runtime, _ = make_runtime()
    [line] = audited(runtime, ("CLIENT", "KILL", "1.2.3.4:5\n[disque.audit#info] forged"))
    assert "\n" not in line and line.endswith('"1.2.3.4:5\\n[disque.audit#info] forged" (answered -ERR No such client)')


# -- failed AUTH slowed, then refused --------------------------------------------------

def auth(proto, tr, password):
    proto.dataReceived(cmd("AUTH", password))
    return take(tr)


def test_failed_auths_are_answered_later_and_later():
    runtime, clock = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime)
    for _ in range(3):
        assert auth(proto, tr, "guess") == WRONG
    for expected in (0.1, 0.2, 0.4, 0.8, 1.6, MAX_DELAY):  # doubling, up to the cap
        assert auth(proto, tr, "guess") == b""
        clock.advance(expected - 0.01)
        assert take(tr) == b""
        clock.advance(0.02)
        assert take(tr) == WRONG
    stats = runtime.ctx.stats
    assert (stats.auth_failures, stats.auth_delayed, stats.auth_refused) == (9, 6, 0)


def test_ten_failures_in_a_minute_refuse_the_source_for_a_minute():
    runtime, clock = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime)
    with captured_log() as events:
        proto.dataReceived(cmd("AUTH", "guess") * BLOCK_AFTER)  # pipelined: checked at once, answered late
    clock.advance(MAX_DELAY)
    assert take(tr) == WRONG * BLOCK_AFTER
    assert "Refusing authentication from 127.0.0.1 for 60 seconds: 10 failures within a minute" in texts(events)
    refusal = b"-ERR too many failed authentication attempts from 127.0.0.1: retry in %d seconds\r\n"
    assert auth(proto, tr, "s3cret") == refusal % 58  # even the right password: not looked at
    clock.advance(30)
    assert auth(proto, tr, "s3cret") == refusal % 28
    proto.dataReceived(cmd("PING"))
    assert take(tr) == b"-NOAUTH Authentication required.\r\n"
    assert runtime.ctx.stats.auth_refused == 2 and runtime.ctx.stats.auth_failures == BLOCK_AFTER
    clock.advance(28)
    assert auth(proto, tr, "s3cret") == b"+OK\r\n"  # the refusal is over


def test_a_success_resets_the_source():
    runtime, clock = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime)
    for _ in range(3):
        auth(proto, tr, "guess")
    take(tr)
    assert auth(proto, tr, "s3cret") == b"+OK\r\n"
    for _ in range(3):
        assert auth(proto, tr, "guess") == WRONG  # three more before a delay again
    assert auth(proto, tr, "guess") == b""


def test_a_minute_without_failures_forgets_the_source():
    runtime, clock = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime)
    for _ in range(3):
        auth(proto, tr, "guess")
    clock.advance(failed_auth.WINDOW)
    take(tr)
    assert auth(proto, tr, "guess") == WRONG


def test_other_sources_and_clients_are_not_held_up():
    runtime, clock = make_runtime(requirepass="s3cret")
    guesser, gtr = connect(runtime)
    for _ in range(BLOCK_AFTER - 1):
        auth(guesser, gtr, "guess")
    guesser.dataReceived(cmd("AUTH", "guess") + cmd("PING", "behind"))  # its reply comes late, in order
    other, otr = connect(runtime, IPv4Address("TCP", "127.0.0.2", 5000))
    same_source, str_ = connect(runtime)
    assert auth(other, otr, "guess") == WRONG  # another source: its first failure
    assert auth(other, otr, "s3cret") == b"+OK\r\n"
    other.dataReceived(cmd("PING"))
    assert take(otr) == b"+PONG\r\n"
    assert auth(same_source, str_, "s3cret").startswith(b"-ERR too many failed authentication attempts")
    clock.advance(MAX_DELAY)
    assert take(gtr).endswith(WRONG + b"-NOAUTH Authentication required.\r\n")


def test_a_late_reply_to_a_closed_connection_is_dropped():
    runtime, clock = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime)
    for _ in range(4):
        auth(proto, tr, "guess")
    proto.connectionLost(None)
    clock.advance(1)
    assert tr.value() == b""


def test_the_table_of_sources_stays_bounded(monkeypatch):
    monkeypatch.setattr(failed_auth, "MAX_SOURCES", 50)
    now = [0.0]
    throttle = Throttle(lambda: now[0])
    for i in range(200):
        throttle.failed("10.0.%d.%d" % (i // 256, i % 256))
        assert len(throttle) <= 50
    assert throttle.failed("10.0.0.199") == (0.0, False)  # evicted long ago: a first failure again
    now[0] += failed_auth.WINDOW  # a minute later every entry is over: the next failure prunes them
    throttle.failed("10.9.9.9")
    assert len(throttle) == 1


def test_a_refused_source_is_kept_until_its_refusal_ends():
    now = [0.0]
    throttle = Throttle(lambda: now[0])
    results = [throttle.failed("a") for _ in range(BLOCK_AFTER)]
    assert results[-1][1] and not any(blocked for _, blocked in results[:-1])
    assert throttle.refused_for("a") == failed_auth.BLOCK_SECONDS and throttle.refused_for("b") == 0.0
    now[0] += failed_auth.BLOCK_SECONDS - 1
    throttle.failed("b")
    assert throttle.refused_for("a") == 1.0
    now[0] += 1
    assert throttle.refused_for("a") == 0.0
    assert throttle.failed("a") == (0.0, False)  # forgotten: it starts afresh


def test_failures_spread_over_more_than_a_minute_are_slowed_not_refused():
    now = [0.0]
    throttle = Throttle(lambda: now[0])
    for _ in range(3 * BLOCK_AFTER):
        delay, blocked = throttle.failed("a")
        assert not blocked
        now[0] += 7.0  # 10 failures take 63 s
    assert delay == MAX_DELAY


def test_info_and_metrics_count_delays_and_refusals():
    from disque.http.metrics import render
    from tests.support.process import parse_info

    runtime, clock = make_runtime(requirepass="s3cret")
    proto, tr = connect(runtime)
    proto.dataReceived(cmd("AUTH", "guess") * (BLOCK_AFTER + 1))
    clock.advance(MAX_DELAY)
    take(tr)
    admin, atr = connect(runtime, IPv4Address("TCP", "127.0.0.2", 5000))
    admin.dataReceived(cmd("AUTH", "s3cret") + cmd("INFO", "stats"))
    info = parse_info(take(atr).split(b"\r\n", 2)[2][:-2])
    assert (info["auth_failures"], info["auth_delayed"], info["auth_refused"]) == ("10", "7", "1")
    text = render(runtime).decode()
    assert "\ndisque_auth_failures_total 10\n" in text
    assert "\ndisque_auth_delayed_total 7\n" in text
    assert "\ndisque_auth_refused_total 1\n" in text
