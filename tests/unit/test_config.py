"""disque.config: the config file, overrides, CONFIG GET / SET / REWRITE.

Expected CONFIG replies are the golden transcripts of the original server
(docs: /work/shared/reference/admin.md, section CONFIG), copied here so the
tests do not depend on that file being present.
"""

import gc
import os
import pathlib
import stat
import tempfile

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from disque.config import (SPECS, Config, ConfigError, ConfigSetError, format_memory,
                           parse_memory, quote, split_args, stringmatch)

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "disque.conf"

# CONFIG GET * of the original (1.0-rc1) run with: port 7911, bind 127.0.0.1,
# dir /srv/disque/7911x, appendonly no, maxmemory 8gb.
GOLDEN_GET_ALL = [
    (b"requirepass", b""), (b"unixsocket", b""), (b"logfile", b""),
    (b"pidfile", b"/var/run/disque.pid"), (b"maxmemory", b"8589934592"),
    (b"maxmemory-samples", b"5"), (b"timeout", b"0"),
    (b"auto-aof-rewrite-percentage", b"100"), (b"auto-aof-rewrite-min-size", b"67108864"),
    (b"slowlog-log-slower-than", b"10000"), (b"latency-monitor-threshold", b"0"),
    (b"slowlog-max-len", b"128"), (b"port", b"7911"), (b"tcp-backlog", b"511"),
    (b"databases", b"16"), (b"maxclients", b"10000"), (b"watchdog-period", b"0"),
    (b"hz", b"10"), (b"cluster-node-timeout", b"15000"), (b"tcp-keepalive", b"no"),
    (b"no-appendfsync-on-rewrite", b"no"), (b"daemonize", b"no"),
    (b"activerehashing", b"yes"), (b"aof-rewrite-incremental-fsync", b"yes"),
    (b"aof-load-truncated", b"yes"), (b"aof-enqueue-jobs-once", b"no"),
    (b"maxmemory-policy", b"acks"), (b"loglevel", b"notice"), (b"appendfsync", b"everysec"),
    (b"syslog-facility", b"local0"), (b"appendonly", b"no"), (b"dir", b"/srv/disque/7911x"),
    (b"client-output-buffer-limit", b"normal 0 0 0"), (b"unixsocketperm", b"0"),
    (b"bind", b"127.0.0.1"),
]
GOLDEN_REPLY_LEN = 1099        # bytes of the whole `CONFIG GET *` reply


def write(path, text):
    path.write_text(text)
    return str(path)


def load(tmp_path, text, name="disque.conf"):
    return Config.from_file(write(tmp_path / name, text))


def resp_array(pairs):
    out = [b"*%d\r\n" % (2 * len(pairs))]
    for item in (v for pair in pairs for v in pair):
        out.append(b"$%d\r\n%s\r\n" % (len(item), item))
    return b"".join(out)


def set_error(config, name, value):
    with pytest.raises(ConfigSetError) as info:
        config.set(name, value)
    return info.value.args[0]


def file_error(tmp_path, text):
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    return str(info.value)


# -- defaults ------------------------------------------------------------

def test_defaults_match_the_original_and_the_local_node():
    c = Config.defaults()
    assert c.path is None
    assert c["port"] == 7711
    assert c["bind"] == ["127.0.0.1"]
    assert c["dir"] == "."
    assert c["appendonly"] is False
    assert c["maxmemory"] == 1024 ** 3
    assert c["cluster-node-timeout"] == 15000
    assert c["hz"] == 10
    assert c["appendfsync"] == "everysec"
    assert c["loglevel"] == "notice"
    assert c["requirepass"] == ""
    assert c["federation-policy"] == "default"
    assert c["persistence"] == "aof"
    assert c["client-output-buffer-limit"] == {"normal": (0, 0, 0)}
    assert c["auto-aof-rewrite-min-size"] == 64 * 1024 * 1024
    assert c["appendfilename"] == "disque.aof"
    assert c["rename-command"] == []
    assert c.changed_from_default() == {}


def test_values_handed_out_are_copies():
    c = Config.defaults()
    c["bind"].append("10.0.0.1")
    assert c["bind"] == ["127.0.0.1"]


def test_get_all_star_reproduces_the_golden_reply(tmp_path):
    d = tmp_path / "node"
    d.mkdir()
    c = load(tmp_path, "port 7911\nbind 127.0.0.1\ndir %s\nappendonly no\nmaxmemory 8gb\n" % d)
    pairs = c.get_all(b"*")
    original = pairs
    expected = [(k, str(d).encode() if k == b"dir" else v) for k, v in GOLDEN_GET_ALL]
    assert original == expected
    golden_dir = b"/srv/disque/7911x"
    reply = resp_array(original).replace(b"$%d\r\n%s" % (len(str(d)), str(d).encode()),
                                         b"$%d\r\n%s" % (len(golden_dir), golden_dir))
    assert len(reply) == GOLDEN_REPLY_LEN
    # the project's own parameters answer to their exact name only
    assert c.get_all(b"federation-policy") == [(b"federation-policy", b"default")]
    assert c.get_all(b"persistence") == [(b"persistence", b"aof")]
    assert c.get_all(b"federation-*") == []


def test_get_all_patterns():
    c = Config.defaults()
    assert [k for k, _ in c.get_all(b"max*")] == [
        b"maxmemory", b"maxmemory-samples", b"maxclients", b"maxmemory-policy"]
    assert c.get_all(b"port") == [(b"port", b"7711")]
    assert c.get_all(b"PORT") == []
    assert c.get_all(b"nomatch") == []
    assert [k for k, _ in c.get_all(b"*fsync*")] == [
        b"no-appendfsync-on-rewrite", b"aof-rewrite-incremental-fsync", b"appendfsync"]
    assert [k for k, _ in c.get_all(b"h?")] == [b"hz"]
    assert [k for k, _ in c.get_all(b"[bp]*")] == [b"pidfile", b"port", b"bind"]
    assert [k for k, _ in c.get_all(b"[^a-z]*")] == []
    assert c.get_all(b"dir") == [(b"dir", os.getcwd().encode())]
    assert c.get_all(b"appendfilename") == []      # read from files, never listed


@pytest.mark.parametrize("pattern, string, expected", [
    (b"*", b"anything", True), (b"**", b"x", True), (b"a*c", b"abbbc", True),
    (b"a*c", b"abbbd", False), (b"?", b"", False), (b"h?", b"hz", True),
    (b"[abc]x", b"bx", True), (b"[^abc]x", b"bx", False), (b"[^abc]x", b"dx", True),
    (b"[a-c]", b"b", True), (b"[c-a]", b"b", True), (b"[a-c]", b"d", False),
    (b"\\*", b"*", True), (b"\\*", b"a", False), (b"[\\]]", b"]", True),
    (b"ab[", b"abc", False), (b"a[bc", b"ab", True), (b"port", b"PORT", False),
    (b"*-*", b"tcp-backlog", True), (b"*x", b"tcp-backlog", False),
])
def test_stringmatch_follows_redis(pattern, string, expected):
    assert stringmatch(pattern, string) is expected


# -- file parsing --------------------------------------------------------

def test_file_parsing(tmp_path):
    c = load(tmp_path, """
# a comment
   # an indented comment

PORT 7712
Bind 127.0.0.1 ::1   10.0.0.1
requirepass "se cret\\x41\\n"
logfile ''
syslog-ident 'it\\'s'
maxmemory 2GB
appendonly YES
loglevel Warning
hz 100000
hz 0
client-output-buffer-limit normal 32mb 16mb 60
unixsocketperm 000
rename-command CONFIG ""
rename-command DEBUG dbg
timeout 30\r
""")
    assert c.path == str(tmp_path / "disque.conf")
    assert c["port"] == 7712
    assert c["bind"] == ["127.0.0.1", "::1", "10.0.0.1"]
    assert c["requirepass"] == "se cretA\n"
    assert c["logfile"] == ""
    assert c["syslog-ident"] == "it's"
    assert c["maxmemory"] == 2 * 1024 ** 3
    assert c["appendonly"] is True
    assert c["loglevel"] == "warning"
    assert c["hz"] == 1                      # clamped to 1..500 like the original
    assert c["client-output-buffer-limit"] == {"normal": (32 << 20, 16 << 20, 60)}
    assert c["unixsocketperm"] == 0
    assert c.get_all(b"unixsocketperm") == [(b"unixsocketperm", b"0")]
    assert c["rename-command"] == [("CONFIG", ""), ("DEBUG", "dbg")]
    assert c["timeout"] == 30
    assert c.get_all(b"bind") == [(b"bind", b"127.0.0.1 ::1 10.0.0.1")]
    assert c.get_all(b"client-output-buffer-limit") == [
        (b"client-output-buffer-limit", b"normal 33554432 16777216 60")]


def test_hz_is_clamped_from_above(tmp_path):
    assert load(tmp_path, "hz 100000\n")["hz"] == 500


def test_last_occurrence_wins(tmp_path):
    assert load(tmp_path, "port 1\nport 2\n")["port"] == 2


def test_include(tmp_path):
    sub = tmp_path / "conf.d"
    sub.mkdir()
    write(sub / "common.conf", "port 7000\nloglevel debug\ninclude deeper.conf\n")
    write(sub / "deeper.conf", "maxclients 5\n")
    c = load(sub, "include common.conf\nport 7001\n", name="main.conf")
    assert (c["port"], c["loglevel"], c["maxclients"]) == (7001, "debug", 5)
    assert c.path == str(sub / "main.conf")       # the main file, for REWRITE
    c = load(tmp_path, "include %s\n" % (sub / "deeper.conf"))
    assert c["maxclients"] == 5


def test_include_loop_is_an_error(tmp_path):
    write(tmp_path / "a.conf", "include b.conf\n")
    write(tmp_path / "b.conf", "include a.conf\n")
    with pytest.raises(ConfigError, match="nested more than 16 deep"):
        Config.from_file(str(tmp_path / "a.conf"))


def test_error_in_included_file_names_that_file(tmp_path):
    write(tmp_path / "inc.conf", "\nport x\n")
    msg = file_error(tmp_path, "include inc.conf\n")
    assert msg.startswith("%s:2: invalid value 'x' for 'port'" % (tmp_path / "inc.conf"))


@pytest.mark.parametrize("text, message", [
    ("fooo bar\n", "disque.conf:1: unknown directive 'fooo' (>>> fooo bar)"),
    ("\n\nport abc\n", "disque.conf:3: invalid value 'abc' for 'port': must be an integer "
                       "between 0 and 65535 (>>> port abc)"),
    ("port 70000\n", "invalid value '70000' for 'port': must be an integer between 0 and 65535"),
    ("port -1\n", "invalid value '-1' for 'port'"),
    ("port\n", "disque.conf:1: wrong number of arguments for 'port': expected 1 (<integer>), "
               "got 0 (>>> port)"),
    ("port 1 2\n", "wrong number of arguments for 'port': expected 1 (<integer>), got 2"),
    ("bind\n", "wrong number of arguments for 'bind': expected at least 1"),
    ("bind " + " ".join("10.0.0.%d" % n for n in range(17)) + "\n",
     "for 'bind': at most 16 addresses are allowed"),
    ('requirepass "open\n', "disque.conf:1: unbalanced quotes (>>> requirepass \"open)"),
    ('requirepass "a"b\n', "unbalanced quotes"),
    ("daemonize maybe\n", "invalid value 'maybe' for 'daemonize': must be 'yes' or 'no'"),
    ("appendonly 1\n", "invalid value '1' for 'appendonly': must be 'yes' or 'no'"),
    ("loglevel loud\n", "invalid value 'loud' for 'loglevel': must be one of debug, verbose, "
                        "notice, warning"),
    ("appendfsync sometimes\n", "must be one of everysec, always, no"),
    ("maxmemory-policy lru\n", "must be one of acks, noeviction"),
    ("syslog-facility local9\n", "must be one of user, local0, local1"),
    ("maxmemory 0\n", "invalid value '0' for 'maxmemory': must be a number of bytes >= 1"),
    ("maxmemory 10tb\n", "invalid value '10tb' for 'maxmemory': must be a number of bytes"),
    ("maxmemory 1.5gb\n", "invalid value '1.5gb' for 'maxmemory'"),
    ("auto-aof-rewrite-min-size -1\n", "must be a number of bytes >= 0"),
    ("maxclients 0\n", "invalid value '0' for 'maxclients': must be an integer between 1 and"),
    ("maxmemory-samples 0\n", "for 'maxmemory-samples': must be an integer between 1 and"),
    ("databases 0\n", "for 'databases'"),
    ("timeout -5\n", "invalid value '-5' for 'timeout'"),
    ("tcp-keepalive -1\n", "for 'tcp-keepalive'"),
    ("tcp-backlog -1\n", "for 'tcp-backlog'"),
    ("auto-aof-rewrite-percentage -1\n", "for 'auto-aof-rewrite-percentage'"),
    ("latency-monitor-threshold -1\n", "for 'latency-monitor-threshold': must be an integer >= 0"),
    ("cluster-node-timeout 0\n", "for 'cluster-node-timeout': must be an integer >= 1"),
    ("slowlog-max-len -1\n", "for 'slowlog-max-len'"),
    ("hz fast\n", "invalid value 'fast' for 'hz': must be an integer (values outside 1..500 "
                  "are clamped)"),
    ("unixsocketperm 999\n", "for 'unixsocketperm': must be an octal mode between 0 and 777"),
    ("unixsocketperm 1777\n", "for 'unixsocketperm'"),
    ("appendfilename dir/x.aof\n", "for 'appendfilename': must be a file name, not a path"),
    ("requirepass " + "x" * 513 + "\n", "must be at most 512 bytes long"),
    ("dir /no/such/dir\n", "invalid value '/no/such/dir' for 'dir': can't use it as working "
                           "directory: No such file or directory"),
    ("logfile /no/such/dir/disque.log\n", "for 'logfile': can't open the log file: No such file"),
    ("logfile /\n", "for 'logfile': can't open the log file: Is a directory"),
    ("federation-policy ''\n", "for 'federation-policy': must not be empty"),
    ("client-output-buffer-limit normal 1 2\n",
     "wrong number of arguments for 'client-output-buffer-limit': expected 4"),
    ("client-output-buffer-limit slave 1 2 3\n", "the class must be one of normal"),
    ("client-output-buffer-limit normal 1 2 -3\n", "for 'client-output-buffer-limit'"),
    ("client-output-buffer-limit normal -1 2 3\n", "limits must not be negative"),
    ("rename-command CONFIG\n", "wrong number of arguments for 'rename-command': expected 2"),
    ("include\n", "wrong number of arguments for 'include'"),
    ("include nowhere.conf\n", "/nowhere.conf': No such file or directory "
                               "(>>> include nowhere.conf)"),
])
def test_file_errors(tmp_path, text, message):
    assert message in file_error(tmp_path, text)


def test_error_message_starts_with_the_path(tmp_path):
    msg = file_error(tmp_path, "port 1\nfooo bar\n")
    assert msg == "%s:2: unknown directive 'fooo' (>>> fooo bar)" % (tmp_path / "disque.conf")
    msg = file_error(tmp_path, "include nowhere.conf\n")
    assert msg == "%s:1: can't open config file '%s': No such file or directory (>>> include " \
        "nowhere.conf)" % (tmp_path / "disque.conf", tmp_path / "nowhere.conf")


def test_path_is_absolute(tmp_path, monkeypatch):
    write(tmp_path / "rel.conf", "port 1\n")
    monkeypatch.chdir(tmp_path)
    assert Config.from_file("rel.conf").path == str(tmp_path / "rel.conf")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="can't open config file '.*nope.conf': No such file"):
        Config.from_file(str(tmp_path / "nope.conf"))


def test_example_config_documents_every_directive_and_sets_the_defaults():
    c = Config.from_file(str(EXAMPLE))
    assert c.changed_from_default() == {}
    text = EXAMPLE.read_text()
    for spec in SPECS:
        assert ("\n%s " % spec.name) in text or ("\n# %s " % spec.name) in text, spec.name
    assert "\ninclude " in text or "\n# include " in text
    for line in ("bind 127.0.0.1", "port 7711", "dir .", "appendonly no"):
        assert "\n%s\n" % line in text


# -- overrides -----------------------------------------------------------

def test_overrides(tmp_path):
    c = load(tmp_path, "port 7712\nloglevel debug\n")
    c.apply_overrides({"port": "7713", "APPENDONLY": "yes", "bind": "127.0.0.1 ::1",
                       "requirepass": "two words", "maxmemory": "2mb",
                       "client-output-buffer-limit": "normal 1mb 1kb 5",
                       "federation-policy": "mine:fast=1"})
    assert c["port"] == 7713
    assert c["loglevel"] == "debug"
    assert c["appendonly"] is True
    assert c["bind"] == ["127.0.0.1", "::1"]
    assert c["requirepass"] == "two words"          # one-argument values are verbatim
    assert c["maxmemory"] == 2 * 1024 * 1024
    assert c["client-output-buffer-limit"] == {"normal": (1 << 20, 1024, 5)}
    assert c["federation-policy"] == "mine:fast=1"


def test_override_include(tmp_path):
    c = Config.defaults()
    c.apply_overrides({"include": write(tmp_path / "x.conf", "port 9\n")})
    assert c["port"] == 9


@pytest.mark.parametrize("overrides, message", [
    ({"port": "abc"}, "command-line option 'port': invalid value 'abc' for 'port': must be an "
                      "integer between 0 and 65535"),
    ({"fooo": "1"}, "command-line option 'fooo': unknown directive 'fooo'"),
    ({"appendonly": "maybe"}, "command-line option 'appendonly': invalid value 'maybe'"),
    ({"bind": ""}, "command-line option 'bind': wrong number of arguments for 'bind'"),
    ({"bind": '"unbalanced'}, "command-line option 'bind': unbalanced quotes"),
])
def test_override_errors(overrides, message):
    with pytest.raises(ConfigError) as info:
        Config.defaults().apply_overrides(overrides)
    assert message in str(info.value)


# -- CONFIG SET ----------------------------------------------------------

# Those of the original, less the fixed ones (not implemented: only their
# default is accepted) and dir (the node does not move its files at run time).
RUNTIME = {
    "requirepass", "maxmemory", "timeout", "auto-aof-rewrite-percentage",
    "auto-aof-rewrite-min-size", "slowlog-log-slower-than", "latency-monitor-threshold",
    "slowlog-max-len", "maxclients", "watchdog-period", "hz", "cluster-node-timeout",
    "tcp-keepalive", "no-appendfsync-on-rewrite", "aof-rewrite-incremental-fsync", "aof-load-truncated",
    "aof-enqueue-jobs-once", "maxmemory-policy", "loglevel", "appendfsync", "appendonly",
    "client-output-buffer-limit",
}
FIXED = {"unixsocket", "unixsocketperm", "pidfile", "maxmemory-samples", "databases", "daemonize",
         "activerehashing"}


def test_settable_parameters_are_those_of_the_original():
    assert {s.name for s in SPECS if s.settable and s.original} == RUNTIME
    # gc-freeze-interval is fixed at 0 where the runtime has no gc.freeze (PyPy)
    assert {s.name for s in SPECS if s.fixed} == FIXED | (set() if hasattr(gc, "freeze") else {"gc-freeze-interval"})
    assert not any(s.settable for s in SPECS if s.fixed)
    # and the TLS directives whose CONFIG SET reloads the certificates (disque.node.tls.RELOADABLE)
    assert {s.name for s in SPECS if s.settable and not s.original} == {
        "dedup-window", "max-deliveries", "output-flush", "cluster-password", "client-query-buffer-limit", "proto-max-bulk-len",
        "cluster-link-sendbuf-limit", "metrics-max-queues", "aof-load-damaged", "acllog-max-len", "protected-mode",
        "maxmemory-clients", "http-allowed-hosts", "log-tag", "cluster-seeds",
            "tls-auth-clients-user"} | {
        "tls-cert-file", "tls-key-file", "tls-ca-cert-file", "tls-ca-cert-dir", "tls-auth-clients", "tls-protocols",
        "tls-ciphers", "tls-ciphersuites"}


def test_set_golden_sequence():
    c = Config.defaults()
    c.set(b"loglevel", b"warning")
    assert c.get_all(b"loglevel") == [(b"loglevel", b"warning")]
    c.set(b"loglevel", b"notice")
    c.set(b"maxmemory", b"4gb")
    assert c.get_all(b"maxmemory") == [(b"maxmemory", b"4294967296")]
    c.set(b"maxmemory", b"8gb")
    c.set(b"maxclients", b"1000")
    c.set(b"slowlog-log-slower-than", b"20000")
    assert c.get_all(b"slowlog-log-slower-than") == [(b"slowlog-log-slower-than", b"20000")]
    assert c["maxclients"] == 1000 and c["maxmemory"] == 8 << 30


def test_set_golden_errors():
    c = Config.defaults()
    assert set_error(c, b"loglevel", b"bogus") == b"Invalid argument 'bogus' for CONFIG SET 'loglevel'"
    assert set_error(c, b"maxmemory", b"abc") == b"Invalid argument 'abc' for CONFIG SET 'maxmemory'"
    assert set_error(c, b"bogus-param", b"1") == b"Unsupported CONFIG parameter: bogus-param"
    assert set_error(c, b"port", b"1234") == b"Unsupported CONFIG parameter: port"
    assert c["loglevel"] == "notice" and c["maxmemory"] == 1 << 30 and c["port"] == 7711


def test_set_names_are_case_insensitive_and_echoed_as_given():
    c = Config.defaults()
    c.set(b"LogLevel", b"DEBUG")
    assert c["loglevel"] == "debug"
    assert set_error(c, b"LOGLEVEL", b"x") == b"Invalid argument 'x' for CONFIG SET 'LOGLEVEL'"
    assert set_error(c, b"BIND", b"1.2.3.4") == b"Unsupported CONFIG parameter: BIND"


@pytest.mark.parametrize("name", ["bind", "daemonize", "databases", "unixsocket", "pidfile",
                                  "logfile", "syslog-facility", "syslog-enabled", "appendfilename",
                                  "federation-policy", "persistence", "rename-command", "include",
                                  "tcp-backlog", "dir", "activerehashing", "maxmemory-samples",
                                  "unixsocketperm", "tls-port", "tls-cluster"])
def test_not_settable_at_run_time(name):
    expected = b"Unsupported CONFIG parameter: " + name.encode()
    assert set_error(Config.defaults(), name.encode(), b"x") == expected


@pytest.mark.parametrize("name, value", [
    ("maxmemory", "-1"), ("maxmemory", "0"), ("maxmemory", ""), ("maxclients", "0"),
    ("timeout", "-1"), ("timeout", "1.5"), ("hz", "-1"),
    ("slowlog-log-slower-than", "-1"), ("slowlog-max-len", "-2"), ("cluster-node-timeout", "0"),
    ("tcp-keepalive", "60"), ("appendonly", "1"), ("no-appendfsync-on-rewrite", "on"),
    ("maxmemory-policy", "allkeys-lru"), ("appendfsync", "sometimes"),
    ("client-output-buffer-limit", "normal 1 2"), ("client-output-buffer-limit", "slave 1 2 3"),
    ("client-output-buffer-limit", "normal 1mb 2 3"), ("client-output-buffer-limit", "normal  1 2 3"),
    ("requirepass", "x" * 513), ("watchdog-period", "-1"), ("latency-monitor-threshold", "x"),
])
def test_set_invalid_argument(name, value):
    expected = b"Invalid argument '%s' for CONFIG SET '%s'" % (value.encode(), name.encode())
    assert set_error(Config.defaults(), name.encode(), value.encode()) == expected


def test_set_values():
    c = Config.defaults()
    c.set(b"hz", b"0")
    assert c["hz"] == 1
    c.set(b"hz", b"1000")
    assert c["hz"] == 500
    c.set(b"tcp-keepalive", b"yes")              # the original takes yes/no here
    assert c["tcp-keepalive"] == 300 and c.get_all(b"tcp-keepalive") == [(b"tcp-keepalive", b"yes")]
    c.set(b"tcp-keepalive", b"no")
    assert c["tcp-keepalive"] == 0 and c.get_all(b"tcp-keepalive") == [(b"tcp-keepalive", b"no")]
    c.apply_overrides({"tcp-keepalive": "60"})   # the file's interval, kept by "yes"
    c.set(b"tcp-keepalive", b"yes")
    assert c["tcp-keepalive"] == 60
    c.set(b"appendonly", b"yes")
    assert c["appendonly"] is True
    c.set(b"requirepass", b"secret")
    assert c["requirepass"] == "secret"
    c.set(b"requirepass", b"")
    assert c["requirepass"] == ""
    c.set(b"client-output-buffer-limit", b"normal 100 50 10")
    assert c["client-output-buffer-limit"] == {"normal": (100, 50, 10)}
    c.set(b"client-output-buffer-limit", b"")   # nothing to change, accepted
    assert c.get_all(b"client-output-buffer-limit") == [
        (b"client-output-buffer-limit", b"normal 100 50 10")]
    c.set(b"auto-aof-rewrite-min-size", b"1mb")
    assert c["auto-aof-rewrite-min-size"] == 1 << 20
    c.set(b"maxmemory-policy", b"NoEviction")
    assert c["maxmemory-policy"] == "noeviction"


def test_appliers():
    """on_change: the one way a running node follows a change (see the
    config module docstring)."""
    c = Config.defaults()
    seen = []
    c.on_change("slowlog-log-slower-than", seen.append)
    forget = c.on_change("loglevel", lambda v: seen.append(("loglevel", v)))
    assert seen == [10000, ("loglevel", "notice")]     # applied at once: start-up takes the same path
    c.set(b"SLOWLOG-LOG-SLOWER-THAN", b"5")
    c.set(b"maxclients", b"7")
    with pytest.raises(ConfigSetError):
        c.set(b"slowlog-log-slower-than", b"x")
    c.set(b"loglevel", b"Debug")
    assert seen == [10000, ("loglevel", "notice"), 5, ("loglevel", "debug")]
    forget()
    c.set(b"loglevel", b"notice")
    assert seen[-1] == ("loglevel", "debug")
    with pytest.raises(KeyError):
        c.on_change("no-such-directive", seen.append)


def test_an_applier_refuses_a_value():
    c = Config.defaults()
    taken = []
    c.on_change("hz", taken.append)

    def refuse_odd(hz):
        if hz % 2:
            raise ConfigSetError(b"hz must be even here")
    c.on_change("hz", refuse_odd)
    c.on_change("hz", taken.append)                    # after the refusing one: never sees 11
    c.set(b"hz", b"20")
    assert set_error(c, b"hz", b"11") == b"hz must be even here"
    assert c["hz"] == 20 and c.get_all(b"hz") == [(b"hz", b"20")]
    assert taken == [10, 10, 20, 20, 11, 20]           # the first one was given 20 back
    c2 = Config.defaults()
    c2.apply_overrides({"hz": "11"})
    with pytest.raises(ConfigError, match="hz: hz must be even here"):
        c2.on_change("hz", refuse_odd)                 # at start-up: start-up stops


@pytest.mark.parametrize("name, value, message", [
    ("daemonize", "yes", "unsupported value 'yes' for 'daemonize': twistd runs the node in the background "
                         "unless given -n (only no is accepted)"),
    ("databases", "4", "unsupported value '4' for 'databases': Disque has no databases (only 16 is accepted)"),
    ("unixsocket", "/tmp/d.sock", "for 'unixsocket': this node listens on TCP only (only \"\" is accepted)"),
    ("unixsocketperm", "700", "for 'unixsocketperm': this node listens on TCP only (only 0 is accepted)"),
    ("pidfile", "/tmp/d.pid", "use twistd --pidfile <path>"),
    ("maxmemory-samples", "10", "eviction does not sample"),
    ("activerehashing", "no", "there is no rehashing to do (only yes is accepted)"),
])
def test_fixed_directives_accept_only_their_default(tmp_path, name, value, message):
    spec = next(s for s in SPECS if s.name == name)
    assert spec.fixed
    assert message in file_error(tmp_path, "%s %s\n" % (name, value))
    with pytest.raises(ConfigError) as info:
        Config.defaults().apply_overrides({name: value})
    assert str(info.value).startswith("command-line option '%s': unsupported value" % name)
    assert set_error(Config.defaults(), name.encode(), value.encode()) == \
        b"Unsupported CONFIG parameter: " + name.encode()
    default = Config.defaults().get_all(name.encode())[0][1].decode()
    assert load(tmp_path, '%s "%s"\n' % (name, default))[name] == spec.default


# -- memory units --------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("0", 0), ("123", 123), ("1b", 1), ("1k", 1000), ("1kb", 1024), ("1K", 1000), ("1KB", 1024),
    ("2m", 2_000_000), ("2mb", 2 << 20), ("3g", 3_000_000_000), ("3gb", 3 << 30),
    ("1Gb", 1 << 30), ("1gB", 1 << 30), ("-2kb", -2048),
])
def test_parse_memory(text, value):
    assert parse_memory(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1.5k", "1 kb", "1tb", "k", "1kbb", "+1"])
def test_parse_memory_rejects(text):
    with pytest.raises(ValueError):
        parse_memory(text)


def test_format_memory():
    assert [format_memory(n) for n in (0, 1000, 1024, 1536, 1 << 20, 3 << 30, 1025)] == [
        "0", "1000", "1kb", "1536", "1mb", "3gb", "1025"]


# -- argument splitting and quoting --------------------------------------

@pytest.mark.parametrize("line, args", [
    (b"", []), (b"   ", []), (b"a b\tc", [b"a", b"b", b"c"]),
    (b'"a b" c', [b"a b", b"c"]), (b"'a b' c", [b"a b", b"c"]),
    (b'"\\x41\\n\\r\\t\\b\\a\\"\\\\\\q"', [b"A\n\r\t\b\a\"\\q"]),
    (b'"\\x4"', [b"x4"]), (b"'it\\'s' '\\n'", [b"it's", b"\\n"]),
    (b'ab"c d"', [b"abc d"]), (b'""', [b""]), (b"''", [b""]),
])
def test_split_args(line, args):
    assert split_args(line) == args


@pytest.mark.parametrize("line", [b'"abc', b"'abc", b'"a"b', b"'a'b", b'"abc\\"'])
def test_split_args_rejects(line):
    assert split_args(line) is None


@given(st.binary(max_size=40))
def test_quote_round_trips(data):
    assert split_args(quote(data)) == [data]


# -- CONFIG REWRITE ------------------------------------------------------

ORIGINAL_FILE = """\
# My node
port 7712

# memory
maxmemory 2gb
unknown-directive-kept as is
loglevel debug
LOGLEVEL verbose
rename-command DEBUG ""
bind 127.0.0.1
include extra.conf
"""


def test_rewrite_round_trip(tmp_path):
    write(tmp_path / "extra.conf", "hz 20\n")
    path = tmp_path / "disque.conf"
    write(path, ORIGINAL_FILE.replace("unknown-directive-kept as is\n", ""))
    c = Config.from_file(str(path))
    write(path, ORIGINAL_FILE)                    # unknown lines survive a rewrite
    c.set(b"maxmemory", b"4gb")
    c.set(b"appendfsync", b"always")
    c.set(b"client-output-buffer-limit", b"normal 1048576 1024 5")
    os.chmod(path, 0o600)
    c.rewrite()
    assert path.read_text() == """\
# My node
port 7712

# memory
maxmemory 4gb
unknown-directive-kept as is
loglevel verbose

rename-command DEBUG ""
bind 127.0.0.1
include extra.conf
# Generated by CONFIG REWRITE
hz 20
appendfsync always
client-output-buffer-limit normal 1mb 1kb 5
"""
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]   # no temp file left
    write(path, path.read_text().replace("unknown-directive-kept as is\n", ""))
    again = Config.from_file(str(path))
    assert again.changed_from_default() == c.changed_from_default()
    # a second rewrite appends nothing new and keeps a single signature
    c.set(b"loglevel", b"warning")
    c.rewrite()
    text = path.read_text()
    assert text.count("# Generated by CONFIG REWRITE") == 1
    assert "loglevel warning\n" in text and "verbose" not in text


def test_rewrite_removes_unset_values_and_duplicates(tmp_path):
    c = load(tmp_path, "requirepass secret\nport 1\nport 2\nport 3\n\n\n\nhz 5\n")
    c.set(b"requirepass", b"")
    c.set(b"hz", b"10")
    c.rewrite()
    assert (tmp_path / "disque.conf").read_text() == "\nport 3\n\nhz 10\n"


def test_rewrite_quotes_strings(tmp_path):
    c = load(tmp_path, "")
    c.apply_overrides({"syslog-ident": 'a "b"\n', "persistence": "aof:fsync=always"})
    c.rewrite()
    text = (tmp_path / "disque.conf").read_text()
    assert text == ('# Generated by CONFIG REWRITE\npersistence "aof:fsync=always"\n'
                    'syslog-ident "a \\"b\\"\\n"\n')
    assert Config.from_file(str(tmp_path / "disque.conf"))["syslog-ident"] == 'a "b"\n'


def test_rewrite_keeps_unparsable_lines_as_comments(tmp_path):
    path = tmp_path / "disque.conf"
    c = load(tmp_path, "port 7712\n")
    write(path, 'port 7712\nfoo "unbalanced\n')
    c.rewrite()
    assert path.read_text() == 'port 7712\n# ??? foo "unbalanced\n'


def test_rewrite_creates_a_missing_file(tmp_path):
    c = load(tmp_path, "port 7001\n")
    os.unlink(tmp_path / "disque.conf")
    c.rewrite()
    assert (tmp_path / "disque.conf").read_text() == "# Generated by CONFIG REWRITE\nport 7001\n"


def test_rewrite_through_a_symlink_keeps_the_link(tmp_path):
    real = tmp_path / "real.conf"
    write(real, "port 7001\n")
    (tmp_path / "link.conf").symlink_to(real)
    c = Config.from_file(str(tmp_path / "link.conf"))
    c.set(b"hz", b"11")
    c.rewrite()
    assert os.path.islink(tmp_path / "link.conf")
    assert real.read_text().endswith("hz 11\n")


def test_rewrite_errors(tmp_path):
    assert set_error_rewrite(Config.defaults()) == b"The server is running without a config file"
    c = load(tmp_path, "port 7001\n")
    c.path = str(tmp_path / "no-such-dir" / "disque.conf")
    assert set_error_rewrite(c) == b"Rewriting config file: No such file or directory"
    c.path = str(tmp_path)                        # a directory: cannot be read as a file
    assert set_error_rewrite(c) == b"Rewriting config file: Is a directory"


def set_error_rewrite(config):
    with pytest.raises(ConfigSetError) as info:
        config.rewrite()
    return info.value.args[0]


# -- property: whatever rewrite() writes parses back to the same value ----

_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


def _value_strategy(spec):
    if spec.kind == "int":
        return st.integers(spec.lo, spec.hi).map(str) | st.integers(-10, 100_000).map(str)
    if spec.kind == "mem":
        units = st.sampled_from(["", "b", "k", "kb", "m", "mb", "g", "gb", "K", "GB"])
        return st.builds(lambda n, u: "%d%s" % (n, u), st.integers(0, 10 ** 6), units)
    if spec.kind == "share":
        return st.integers(0, 10 ** 6).map(str) | st.integers(0, 100).map("{}%".format)
    if spec.kind == "bool":
        return st.sampled_from(["yes", "no", "YES", "No"])
    if spec.kind == "enum":
        return st.sampled_from(spec.choices + tuple(c.upper() for c in spec.choices))
    if spec.kind == "octal":
        return st.integers(0, 0o777).map(lambda n: "%o" % n)
    if spec.kind == "list":
        word = st.text("abc.:-_ \"'\\", min_size=1, max_size=8).map(str.encode).map(quote)
        word = word.map(bytes.decode)
        return st.lists(word, min_size=1, max_size=4).map(" ".join)
    if spec.kind == "obl":
        return st.builds(lambda h, s, t: "normal %s %s %d" % (h, s, t), st.integers(0, 10 ** 10),
                         st.integers(0, 10 ** 10), st.integers(0, 1000))
    if spec.name == "dir":
        return st.just(".")
    return _TEXT


REWRITABLE = [s for s in SPECS if s.rewrite and not s.fixed]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_rewrite_output_reparses_to_the_same_values(data):
    config = Config.defaults()
    for spec in data.draw(st.lists(st.sampled_from(REWRITABLE), max_size=8, unique=True)):
        value = data.draw(_value_strategy(spec), label=spec.name)
        try:
            config.apply_overrides({spec.name: value})
        except ConfigError:
            assume(False)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "disque.conf")
        original = data.draw(st.sampled_from(["", "port 1\nport 2\n# comment\nhz 7\n",
                                              "bind 1.2.3.4 5.6.7.8\nfoo bar\n"]))
        with open(path, "w") as f:
            f.write(original)
        config.path = path
        if "foo bar" in original:
            config.rewrite()                      # foo is unknown: strip it before reloading
            with open(path) as f:
                text = f.read().replace("foo bar\n", "")
            with open(path, "w") as f:
                f.write(text)
        config.rewrite()
        reloaded = Config.from_file(path)
    for spec in SPECS:
        assert reloaded[spec.name] == config[spec.name], spec.name
    assert reloaded.get_all(b"*") == config.get_all(b"*")
