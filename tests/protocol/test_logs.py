"""The node's log in memory (disque.io.logs): levels, the log file, syslog,
and how a running node follows CONFIG SET loglevel."""

import os

import pytest
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from disque import DISQUE_VERSION
from disque.config import Config
from disque.io.logs import LEVELS, NodeLog, logger

from tests.support.memory import FakeSyslog, Node


@pytest.fixture
def published():
    """What reaches Twisted's global log publisher (twistd's log)."""
    events = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


@pytest.fixture
def node_log():
    log = NodeLog()
    yield log
    log.reset()


def emit_all(log, namespace="disque.test"):
    from twisted.logger import Logger

    emitter = Logger(namespace=namespace, observer=log)
    emitter.debug("a debug line")
    emitter.info("an info line")
    emitter.warn("a warn line")
    emitter.error("an error line")


def lines(events):
    return [formatEvent(e) for e in events]


@pytest.mark.parametrize("level, written", [
    ("debug", ["a debug line", "an info line", "a warn line", "an error line"]),
    ("verbose", ["a debug line", "an info line", "a warn line", "an error line"]),
    ("notice", ["an info line", "a warn line", "an error line"]),
    ("warning", ["a warn line", "an error line"]),
])
def test_loglevel_filters_the_node_lines(node_log, published, level, written):
    config = Config.defaults()
    config.apply_overrides({"loglevel": level})
    node_log.follow(config)
    emit_all(node_log)
    assert lines(published) == written
    assert node_log.level is LEVELS[level]


def test_config_set_loglevel_takes_effect_at_once(node_log, published):
    config = Config.defaults()
    node_log.follow(config)
    emit_all(node_log)
    config.set(b"loglevel", b"warning")
    emit_all(node_log)
    config.set(b"loglevel", b"debug")
    emit_all(node_log)
    assert lines(published) == [
        "an info line", "a warn line", "an error line",
        "a warn line", "an error line",
        "a debug line", "an info line", "a warn line", "an error line"]


def test_logfile_gets_the_node_lines_instead_of_the_process_log(node_log, published, tmp_path):
    path = tmp_path / "node.log"
    path.write_text("an earlier line\n")
    config = Config.defaults()
    config.apply_overrides({"logfile": str(path)})
    node_log.follow(config)
    emit_all(node_log)
    assert published == []
    text = path.read_text()
    assert text.startswith("an earlier line\n")              # appended, never truncated
    assert [line.split("] ", 1)[1] for line in text.splitlines()[1:]] == [
        "an info line", "a warn line", "an error line"]
    assert "[disque.test#warn]" in text
    os.rename(path, tmp_path / "node.log.1")                  # rotated away: a new file starts
    emit_all(node_log)
    assert path.read_text().count("\n") == 3


def test_an_unwritable_logfile_falls_back_to_the_process_log(node_log, published, tmp_path):
    (tmp_path / "logs").mkdir()
    config = Config.defaults()
    config.apply_overrides({"logfile": str(tmp_path / "logs" / "node.log")})
    node_log.follow(config)
    (tmp_path / "logs").rmdir()                               # the directory went away
    emit_all(node_log)
    assert lines(published) == ["an info line", "a warn line", "an error line"]


def test_syslog_gets_the_node_lines_at_syslog_priorities(node_log, published):
    fake = FakeSyslog()
    config = Config.defaults()
    config.apply_overrides({"syslog-enabled": "yes", "loglevel": "debug"})
    node_log.follow(config, syslog=fake)
    emit_all(node_log)
    assert fake.opened == ("disque", fake.LOG_PID | fake.LOG_NDELAY, fake.LOG_LOCAL0)
    assert fake.lines == [(fake.LOG_DEBUG, "a debug line"), (fake.LOG_NOTICE, "an info line"),
                          (fake.LOG_WARNING, "a warn line"), (fake.LOG_ERR, "an error line")]
    assert len(published) == 4                                # and to the log as well


def test_reset_is_the_default(node_log, published, tmp_path):
    config = Config.defaults()
    config.apply_overrides({"logfile": str(tmp_path / "x.log"), "loglevel": "warning"})
    forget = node_log.follow(config)
    for f in forget:
        f()
    node_log.reset()
    config.set(b"loglevel", b"debug")                         # no longer followed
    emit_all(node_log)
    assert lines(published) == ["an info line", "a warn line", "an error line"]
    assert not (tmp_path / "x.log").exists()


def test_the_node_modules_log_through_the_node_log():
    import disque.bus.links
    import disque.bus.protocol
    import disque.persistence.aof
    import disque.resp.protocol
    import disque.node.runtime
    import disque.node.service
    import disque.node.timers
    import disque.http.access
    from disque.client.txclient import DisqueClient
    from disque.io.logs import node_log
    from disque.worker.service import Worker

    for module in (disque.bus.links, disque.bus.protocol, disque.persistence.aof, disque.resp.protocol,
                   disque.node.runtime, disque.node.service, disque.node.timers, disque.http.access):
        assert module.log.observer is node_log, module.__name__
        assert module.log.namespace.startswith("disque"), module.__name__
    assert logger("disque.x").observer is node_log
    for cls in (Worker, DisqueClient):  # the worker and its client too, in their own process or a node's
        assert cls.log.observer is node_log and cls.log.namespace.startswith("disque."), cls


def test_a_node_service_follows_and_then_lets_go(tmp_path, published):
    node = Node(tmp_path, {"loglevel": "warning"})
    from disque.io.logs import node_log

    assert node_log.level is LogLevel.warn
    node.connect().call("CONFIG", "SET", "loglevel", "verbose")
    assert node_log.level is LogLevel.debug
    node.service.stopService()
    assert node_log.level is LogLevel.info                  # the default again
    node.config.set(b"loglevel", b"warning")                # a stopped node's config is not followed
    assert node_log.level is LogLevel.info


# -- log-tag -----------------------------------------------------------------------

def test_log_tag_starts_every_line_in_every_destination(node_log, published, tmp_path):
    fake = FakeSyslog()
    path = tmp_path / "node.log"
    config = Config.defaults()
    config.apply_overrides({"log-tag": "{port}/{id}", "logfile": str(path), "syslog-enabled": "yes"})
    node_log.follow(config, syslog=fake)
    emit_all(node_log)                                        # before the service knows port and ID
    node_log.set_tag_fields(port=7712, id="3f2a9c1b5e" + "0" * 30)
    emit_all(node_log)
    file_lines = [line.split("] ", 1)[1] for line in path.read_text().splitlines()]
    assert file_lines == ["[?/?] an info line", "[?/?] a warn line", "[?/?] an error line",
                          "[7712/3f2a9c1b] an info line", "[7712/3f2a9c1b] a warn line",
                          "[7712/3f2a9c1b] an error line"]
    assert [text for _, text in fake.lines] == file_lines     # syslog: the same words
    node_log.path = ""                                        # (to the process's log, twistd's)
    config.set(b"log-tag", b"eu-1")                           # CONFIG SET: at once
    emit_all(node_log)
    config.set(b"log-tag", b"")                               # and off again: lines as they always were
    emit_all(node_log)
    assert lines(published) == ["[eu-1] an info line", "[eu-1] a warn line", "[eu-1] an error line",
                                "an info line", "a warn line", "an error line"]


def test_the_tag_is_text_never_a_format(node_log, published):
    from twisted.logger import Logger

    config = Config.defaults()
    config.apply_overrides({"log-tag": "n{port}"})
    node_log.follow(config)
    node_log.set_tag_fields(port=7711)
    emitter = Logger(namespace="disque.test", observer=node_log)
    emitter.info("{a} and {b!r}", a="{port}", b="x")           # the event's own fields, as they were
    try:
        1 / 0
    except ZeroDivisionError:
        emitter.failure("it failed")
    assert lines(published) == ["[n7711] {port} and 'x'", "[n7711] it failed"]
    assert published[1]["log_failure"].type is ZeroDivisionError


@pytest.mark.parametrize("value", ["{pid}", "{port", "port}", "{}", "a\nb", "\x1b[31m", "x" * 65])
def test_a_bad_log_tag_is_refused_with_what_it_may_hold(value):
    from disque.config import ConfigError

    with pytest.raises(ConfigError) as e:
        Config.defaults().apply_overrides({"log-tag": value})
    assert "log-tag" in str(e.value)
    if "{" in value or "}" in value:
        assert "{port} (the node's port) and {id} (its short ID)" in str(e.value)


def test_reset_forgets_the_tag(node_log, published):
    config = Config.defaults()
    config.apply_overrides({"log-tag": "{port}"})
    forget = node_log.follow(config)
    node_log.set_tag_fields(port=7711)
    for f in forget:
        f()
    node_log.reset()
    emit_all(node_log)
    config.set(b"log-tag", b"again")                          # no longer followed
    emit_all(node_log)
    assert lines(published) == ["an info line", "a warn line", "an error line"] * 2


def test_a_node_tags_its_lines_with_its_port_and_id(tmp_path, published):
    node = Node(tmp_path, {"log-tag": "{port}/{id}", "port": "7719"})
    ready = [t for t in lines(published) if "ready to accept connections" in t]
    assert ready == ["[7719/%s] Disque %s node %s ready to accept connections on port 7719"
                     % (node.runtime.node.my_id.decode()[:8], DISQUE_VERSION, node.runtime.node.my_id.decode())]
    c = node.connect()
    assert c.call("CONFIG", "GET", "log-tag") == b"*2\r\n$7\r\nlog-tag\r\n$11\r\n{port}/{id}\r\n"
    assert c.call("CONFIG", "SET", "log-tag", "eu-1") == b"+OK\r\n"
    assert lines(published)[-1].startswith('[eu-1] default from ')  # the audit line of that CONFIG SET
    node.service.stopService()


# -- the ready line ----------------------------------------------------------------

@pytest.mark.parametrize("bind, tls, url", [
    ("127.0.0.1", False, "http://127.0.0.1:7790/"),
    ("10.1.2.3", True, "https://10.1.2.3:7790/"),
    ("::1", False, "http://[::1]:7790/"),
    ("disque-1.example.net", True, "https://disque-1.example.net:7790/"),
    ("0.0.0.0", False, "http://127.0.0.1:7790/ (listening on all interfaces)"),
    ("::", True, "https://[::1]:7790/ (listening on all interfaces)"),
])
def test_site_url(bind, tls, url):
    from disque.http import site_url

    assert site_url(bind, 7790, tls) == url


def test_the_ready_line_gives_the_dashboards_url(tmp_path, published):
    from tests.support.tls import make_pki

    node = Node(tmp_path / "plain", {})
    assert lines(published)[-1].endswith("ready to accept connections on port 7711")  # no HTTP side: as before
    node.service.stopService()
    Node(tmp_path / "http", {"http-port": "7790", "http-bind": "0.0.0.0"}).service.stopService()
    assert lines(published)[-1].endswith(
        "ready to accept connections on port 7711; dashboard at http://127.0.0.1:7790/ (listening on all interfaces)")
    pki = make_pki(tmp_path / "pki")
    Node(tmp_path / "https", {"http-port": "7790", "http-tls": "yes", "tls-cert-file": pki.node,
                              "tls-key-file": pki.node_key, "tls-ca-cert-file": pki.ca}).service.stopService()
    assert lines(published)[-1].endswith(
        "ready to accept connections on port 7711; dashboard at https://127.0.0.1:7790/")
