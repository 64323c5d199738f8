"""The node service assembled in memory: DisqueNodeService on a
MemoryReactorClock (no sockets, no real time)."""

from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.testing import MemoryReactorClock

from disque.config import Config
from disque.node.service import STOP_TIMEOUT, DisqueNodeService
from tests.support.memory import captured_log, texts, ticks_in_one_second


def make_service(tmp_path, **overrides):
    config = Config.defaults()
    config.apply_overrides({"dir": str(tmp_path), "port": "7711", **overrides})
    reactor = MemoryReactorClock()
    service = DisqueNodeService(config, reactor=reactor, on_shutdown=lambda: None)
    return service, reactor


def test_the_service_listens_on_the_client_and_bus_ports(tmp_path):
    service, reactor = make_service(tmp_path)
    service.startService()
    try:
        ports = sorted(p[0] for p in reactor.tcpServers)
        assert ports == [7711, 17711]
        assert all(p[3] == "127.0.0.1" for p in reactor.tcpServers)
    finally:
        service.stopService()


def test_hz_set_at_run_time_changes_the_tick_rate(tmp_path):
    service, reactor = make_service(tmp_path)
    service.startService()
    try:
        assert 9 <= ticks_in_one_second(service, reactor) <= 11
        service.config.set(b"hz", b"50")
        reactor.advance(0.2)  # the next tick sees it
        assert 48 <= ticks_in_one_second(service, reactor) <= 52
    finally:
        service.stopService()


def test_twistd_options_build_the_service(tmp_path):
    """What `twistd disque --port ... --set ...` does, without twistd: the
    options parse into a config and makeService assembles the node from it."""
    import pytest

    from disque.persistence.aof import AOFPersistence
    from disque.node.tap import Options, makeService

    options = Options()
    options.parseOptions(["--port", "7799", "--dir", str(tmp_path), "--set", "dedup-window=30",
                          "--federation-policy", "default"])
    service = makeService(options)
    assert isinstance(service, DisqueNodeService)
    assert service.config["port"] == 7799
    assert service.runtime.node.jobs.dedup.window == 30_000
    assert isinstance(service.persistence, AOFPersistence) and not service.runtime.node.persist
    assert service.runtime.node.federation.policy is not None

    bad = Options()
    with pytest.raises(SystemExit) as e:
        bad.parseOptions(["--set", "dedup-window=-5"])
    assert str(e.value).startswith("disque: ") and "dedup-window" in str(e.value)


def test_twistd_options_refuse_a_bad_user_line_in_a_fresh_process(tmp_path):
    """`twistd disque` checks ``user`` lines with the ACL's rules even
    though nothing but its options module is imported yet."""
    import subprocess
    import sys

    code = ("from disque.node.tap import Options\n"
            "Options().parseOptions(['--set', 'user=a on bogus'])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "disque: command-line option 'user': invalid value 'a on bogus' for 'user': "
        "Error in user declaration 'bogus': Syntax error")


class _Stuck(Service):
    """A child service whose stop never ends."""

    def stopService(self):
        super().stopService()
        return Deferred()


def test_stopping_waits_at_most_stop_timeout_and_logs_what_it_left(tmp_path):
    service, reactor = make_service(tmp_path)
    _Stuck().setServiceParent(service)
    service.startService()
    with captured_log() as events:
        stopped = service.stopService()
        reactor.advance(STOP_TIMEOUT - 0.01)
        assert not stopped.called
        reactor.advance(0.01)
        assert stopped.called
    assert "Stopped waiting after %g s for _Stuck: stopping anyway" % STOP_TIMEOUT in texts(events)


def test_a_node_whose_parts_stop_at_once_stops_at_once(tmp_path):
    service, reactor = make_service(tmp_path)
    service.startService()
    with captured_log() as events:
        stopped = service.stopService()
        assert stopped.called
    assert not reactor.getDelayedCalls() and not [t for t in texts(events) if "Stopped waiting" in t]
