"""Strategies (disque.plugins): found by name among the dropins, made from
"name:args", every shipped provider honouring its interface and its
arguments, bad names and arguments refused in one line, and
``twistd disque --help-strategies``."""

import ast
import io
import pathlib
import subprocess
import sys

import pytest
from twisted.internet.testing import MemoryReactorClock
from zope.interface.verify import verifyObject

import disque.node.service
from disque.config import Config
from disque.core.queue import Queue
from disque.interfaces import (IFederationPolicy, IFederationPolicyFactory, IHTTPFrontend, IHTTPFrontendFactory,
                               IPersistence, IPersistenceFactory,
                               IStrategyFactory, LoadError)
from disque.persistence.aof import AOFPersistence
from disque.persistence.records import AOFError
from disque.persistence.none import NoPersistence
from disque.plugins import StrategyError, find_strategy, make_strategy, parse_args, strategies
from disque.node.tap import Options, makeService

PEERS = (b"a" * 40, b"b" * 40)


def config(tmp_path, **overrides):
    c = Config.defaults()
    c.apply_overrides({"dir": str(tmp_path), **overrides})
    return c


# -- every shipped provider ----------------------------------------------------

@pytest.mark.parametrize("interface, spec, product, kind", [
    (IPersistenceFactory, "aof", IPersistence, AOFPersistence),
    (IPersistenceFactory, "none", IPersistence, NoPersistence),
    (IFederationPolicyFactory, "default", IFederationPolicy, None),
    (IHTTPFrontendFactory, "default", IHTTPFrontend, None),
])
def test_each_shipped_strategy_is_found_and_honours_its_interfaces(tmp_path, interface, spec, product, kind):
    factory = find_strategy(interface, spec)
    assert verifyObject(interface, factory) and verifyObject(IStrategyFactory, factory)
    assert factory.name == spec and factory.description and factory.argStringFormat
    made = make_strategy(interface, spec, config(tmp_path))
    assert verifyObject(product, made)
    assert kind is None or type(made) is kind


def test_the_dropin_lists_the_factories_without_describing_them_again():
    import disque.federation
    import disque.persistence
    from twisted.plugins import disque_plugin

    assert disque_plugin.aof_persistence is disque.persistence.aof_persistence
    assert disque_plugin.no_persistence is disque.persistence.no_persistence
    assert disque_plugin.default_policy is disque.federation.default_policy
    import disque.http

    assert disque_plugin.default_frontend is disque.http.default_frontend
    assert [f.name for f in strategies(IHTTPFrontendFactory)] == ["default"]
    assert [f.name for f in strategies(IPersistenceFactory)] == ["aof", "none"]


def test_the_dropin_is_cheap_to_import():
    """Every twistd run imports every dropin: ours loads no provider, no
    node and no reactor."""
    heavy = ["disque.persistence.aof", "disque.persistence.none", "disque.federation.default", "disque.node.service",
             "disque.core", "disque.resp", "twisted.internet.reactor"]
    code = ("import sys, twisted.plugins.disque_plugin; "
            "print([m for m in %r if m in sys.modules])" % heavy)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_service_uses_nothing_of_its_persistence_but_the_interface():
    """service.py reaches its persistence only through names IPersistence
    declares (no hasattr/getattr probing of one provider's extras)."""
    tree = ast.parse(pathlib.Path(disque.node.service.__file__).read_text())
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute) and node.value.attr == "persistence"}
    assert used and used <= set(IPersistence.names()), used - set(IPersistence.names())
    probes = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", "")
              in ("hasattr", "getattr") and "persistence" in ast.dump(node)]
    assert probes == []


def test_one_load_error_type():
    assert issubclass(AOFError, LoadError)


# -- arguments honoured ----------------------------------------------------------

class Turns:
    """A reactor that runs each callLater(0) as one more reactor turn, on demand."""

    def __init__(self):
        self.calls = []

    def callLater(self, delay, f, *args):
        self.calls.append((f, args))


def rewrite_turns(tmp_path, spec, jobs=10):
    """Reactor turns a rewrite of ``jobs`` jobs takes."""
    from disque.core.node import NodeState

    tmp_path = tmp_path / spec.replace(":", "-")
    tmp_path.mkdir()

    aof = make_strategy(IPersistenceFactory, spec, config(tmp_path, appendonly="yes"))
    aof.reactor = reactor = Turns()
    node = NodeState(b"a" * 40, now=1_000_000)
    aof.load(node)
    for i in range(jobs):
        node.addjob.add(b"q", b"body-%d" % i, 1, 0, 30, 3600, 0, False)
    aof.rewrite(node)
    turns = 1
    while reactor.calls:
        f, args = reactor.calls.pop(0)
        f(*args)
        turns += 1
    assert aof.rewriting is None and aof.last_rewrite_status == "ok"
    aof.close()
    assert open(tmp_path / "disque.aof", "rb").read().count(b"LOADJOB") == jobs
    return turns


def test_aof_rewrite_step_sets_the_jobs_written_per_reactor_turn(tmp_path):
    assert make_strategy(IPersistenceFactory, "aof:rewrite-step=3", config(tmp_path)).rewrite_step == 3
    assert rewrite_turns(tmp_path, "aof:rewrite-step=3") == 4  # 3 + 3 + 3 + 1 jobs
    assert rewrite_turns(tmp_path, "aof") == 1  # the default: 5000 per turn


def ask_after_a_busy_import(policy, now=1_000_000):
    q = Queue(b"q", 0)
    policy.received(q, PEERS[0], 1000, now)  # 1000 jobs just came from A
    return [count for nodes, count in policy.wanted(q, now + 100, "waiting", PEERS, 1) if nodes == (PEERS[0],)]


def test_default_policy_request_sizes_follow_its_arguments():
    assert ask_after_a_busy_import(make_strategy(IFederationPolicyFactory, "default", None)) == [100]
    assert ask_after_a_busy_import(make_strategy(IFederationPolicyFactory, "default:max-request=7", None)) == [7]


def broadcasts(policy, every_ms, times):
    q = Queue(b"q", 0)
    now, sent = 1_000_000, 0
    for _ in range(times):
        sent += sum(1 for nodes, count in policy.wanted(q, now, "waiting", PEERS, 1) if count == 1)
        now += every_ms
    return sent


def test_default_policy_broadcast_backoff_follows_its_arguments():
    assert broadcasts(make_strategy(IFederationPolicyFactory, "default", None), 2001, 8) == 3  # 2, 4, 8 s back-off
    capped = make_strategy(IFederationPolicyFactory, "default:bcast-max-delay=2000,adhoc-max-delay=50", None)
    assert broadcasts(capped, 2001, 8) == 8
    assert (capped.bcast_max_delay, capped.adhoc_max_delay) == (2000, 50)


# -- refusals ------------------------------------------------------------------------

@pytest.mark.parametrize("directive, spec, message", [
    ("persistence", "tape", "unknown persistence 'tape' (available: aof, none)"),
    ("persistence", "aof:fsync=always", "persistence 'aof:fsync=always': unknown argument 'fsync' (arguments: "
                                        "rewrite-step=<jobs>"),
    ("persistence", "aof:rewrite-step=0", "persistence 'aof:rewrite-step=0': bad value '0' for 'rewrite-step': "
                                          "must be an integer between 1 and 10000000"),
    ("persistence", "aof:rewrite-step", "persistence 'aof:rewrite-step': expected key=value, got 'rewrite-step'"),
    ("persistence", "none:fast=yes", "persistence 'none:fast=yes': unknown argument 'fast' (arguments: none)"),
    ("federation-policy", "nope", "unknown federation-policy 'nope' (available: default)"),
    ("federation-policy", "default:max-request=5,max-request=6", "argument 'max-request' given twice"),
    ("federation-policy", "default:min-request=9,max-request=8", "min-request (9) must be between 1 and "
                                                                 "max-request (8)"),
])
def test_bad_strategies_stop_start_up_in_one_line(tmp_path, directive, spec, message):
    interface = IPersistenceFactory if directive == "persistence" else IFederationPolicyFactory
    with pytest.raises(StrategyError) as e:
        make_strategy(interface, spec, config(tmp_path))
    assert message in str(e.value)
    options = Options()
    options.parseOptions(["--dir", str(tmp_path), "--" + directive, spec])
    reactor = MemoryReactorClock()
    with pytest.raises(SystemExit) as e:
        makeService(options, reactor=reactor)
    assert str(e.value).startswith("disque: ") and message in str(e.value) and "\n" not in str(e.value)
    assert reactor.tcpServers == []


def test_parse_args_maps_keys_to_keyword_names():
    assert parse_args("", {}) == {}
    assert parse_args(" a-b = 1 ,c=x", {"a-b": int, "c": str}) == {"a_b": 1, "c": "x"}


def test_an_unloadable_aof_stops_start_up_in_one_line(tmp_path):
    (tmp_path / "disque.aof").write_bytes(b"*2\r\n$7\r\nLOADJOB\r\n$3\r\nbad\r\n")
    options = Options()
    options.parseOptions(["--dir", str(tmp_path), "--appendonly", "yes"])
    with pytest.raises(SystemExit) as e:
        makeService(options, reactor=MemoryReactorClock())
    text = str(e.value)
    assert text.startswith("disque: cannot load the append only file: bad LOADJOB record") and "check_aof" in text


# -- --help-strategies -------------------------------------------------------------------

def test_help_strategies_lists_every_strategy_with_its_arguments_then_exits():
    options = Options()
    options.helpOutput = out = io.StringIO()
    with pytest.raises(SystemExit) as e:
        options.parseOptions(["--help-strategies"])
    assert e.value.code == 0
    text = " ".join(out.getvalue().split())  # unwrapped
    for interface in (IPersistenceFactory, IFederationPolicyFactory):
        for factory in strategies(interface):
            assert "%s %s" % (factory.name, factory.description) in text
            assert "arguments: " + factory.argStringFormat in text
    assert "persistence (--persistence" in text and "federation-policy (--federation-policy" in text
    assert "listen, cluster-listen server endpoints: " in text and " tcp, " in text
