"""The node's log in memory (disque.io.logs): levels, the log file, syslog,
and how a running node follows CONFIG SET loglevel."""

import os

import pytest
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

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
    from disque.io.logs import node_log

    for module in (disque.bus.links, disque.bus.protocol, disque.persistence.aof, disque.resp.protocol,
                   disque.node.runtime, disque.node.service, disque.node.timers):
        assert module.log.observer is node_log, module.__name__
        assert module.log.namespace.startswith("disque"), module.__name__
    assert logger("disque.x").observer is node_log


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
