import platform

import pytest

from support import NodeProcess

# Test modules that cannot run on a runtime, with the reason.  They are
# reported as skipped, never silently left out.
PYPY = platform.python_implementation() == "PyPy"
_SPARK = ("test_spark_options", "test_spark_read", "test_spark_recovery", "test_spark_units", "test_spark_write")
NOT_ON_THIS_RUNTIME = dict(dict.fromkeys(_SPARK, (
    "the Spark connector needs pyspark with pyarrow, and pyarrow publishes no PyPy build "
    "(Spark runs its Python workers on CPython): these tests run on CPython")), test_heap=(
    "CPython's heap policy (cycle collector, gc.freeze): PyPy has neither, and the node "
    "makes no freezer there (test_directives checks the directive is fixed at 0)")) if PYPY else {}


class _SkippedModule(pytest.Module):
    def collect(self):
        pytest.skip(NOT_ON_THIS_RUNTIME[self.path.stem])


def pytest_pycollect_makemodule(module_path, parent):
    if module_path.stem in NOT_ON_THIS_RUNTIME:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


@pytest.fixture
def node(tmp_path):
    """A fresh real node process (twistd -n disque) on a free port."""
    n = NodeProcess(tmp_path / "node").start()
    yield n
    n.stop()


@pytest.fixture
def client(node):
    c = node.client()
    yield c
    c.close()


# --- Spark connector (tests/test_spark_*.py) --------------------------------

@pytest.fixture(scope="session")
def spark_session():
    """ONE local[2,4] SparkSession for every Spark test, ``disque`` registered."""
    from spark_support import make_session

    session = make_session()
    yield session
    session.stop()


@pytest.fixture
def spark(spark_session):
    """The shared session, made the JVM's active session again for this
    test.  Spark finds Python data sources through the active session of
    the JVM thread serving the calling Python thread, and Py4J may serve
    the main thread from a new JVM thread (which has none) after other
    Python threads came and went (seen after the killed-driver tests, whose
    scenarios run in threads): then format("disque") is DATA_SOURCE_NOT_FOUND."""
    spark_session._jvm.SparkSession.setActiveSession(spark_session._jsparkSession)
    return spark_session


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """Three real nodes in a full mesh, shared by one test module (tests use
    their own queue names)."""
    from support import start_cluster

    nodes = start_cluster(tmp_path_factory.mktemp("spark-cluster"), 3)
    yield nodes
    for n in nodes:
        n.stop()


@pytest.fixture
def trio(tmp_path):
    """Three fresh real nodes in a full mesh, killed after the test."""
    from support import start_cluster

    nodes = start_cluster(tmp_path, 3)
    yield nodes
    for n in nodes:
        n.kill()


@pytest.fixture
def pair(tmp_path):
    """Two fresh real nodes in a full mesh, killed after the test."""
    from support import start_cluster

    nodes = start_cluster(tmp_path, 2)
    yield nodes
    for n in nodes:
        n.kill()


# --- tiers -------------------------------------------------------------------
# Every test module belongs to one tier, a marker: `unit` (the pure core and
# codecs), `sim` (cores wired in memory by SimCluster), `protocol` (the
# Twisted adapters in memory), `process` (real node, redis-cli or Spark
# processes).  `slow` marks the longest process tests on top.  The fast tiers
# alone: pytest -m "not process".
TIERS = {
    "unit": ("test_core", "test_core_properties", "test_core_purity", "test_config", "test_aof_unit",
             "test_bus_wire", "test_resp_codec", "test_heap", "test_golden_transcripts", "test_golden_engine",
             "test_py39", "test_bus_auth", "test_fuzz_parsers", "test_faultcheck", "test_client_units",
             "test_latency", "test_acl", "test_resp_command", "test_atomic_write"),
    "sim": ("test_cluster_jobs", "test_cluster_membership", "test_federation", "test_extensions_cluster",
            "test_bus_strangers"),
    "protocol": ("test_protocol", "test_bus_protocol", "test_dedup", "test_service", "test_iosim_cluster",
                 "test_endpoints", "test_strategies", "test_directives", "test_logs", "test_output",
                 "test_reactor", "test_bus_password", "test_tls", "test_fuzz_findings", "test_worker",
                 "test_client_failover", "test_http_api", "test_priorities", "test_dashboard", "test_loading", "test_aof_errors",
                 "test_extensions", "test_crash_states", "test_client_memory", "test_access", "test_acl_node",
                 "test_http_access", "test_node_interfaces", "test_front_door"),
    "process": ("test_e2e_aof", "test_e2e_access", "test_e2e_storage", "test_e2e_load_backlog", "test_e2e_logs", "test_e2e_cluster", "test_e2e_dedup", "test_e2e_faults",
                "test_faults_suite", "test_e2e_federation", "test_e2e_node", "test_e2e_password", "test_e2e_bus_closed", "test_e2e_listen",
                "test_e2e_tls", "test_e2e_acl", "test_e2e_http_access", "test_e2e_limits", "test_golden", "test_install", "test_memory",
                "test_spark_options", "test_fuzz_live", "test_e2e_client", "test_e2e_worker", "test_e2e_http",
                "test_e2e_dashboard", "test_e2e_mixed_versions", "test_e2e_extensions", "test_spark_read", "test_spark_recovery", "test_spark_units", "test_spark_write"),
}
_TIER_OF = {module: tier for tier, modules in TIERS.items() for module in modules}


def pytest_collection_modifyitems(config, items):
    for item in items:
        module = item.module.__name__
        tier = _TIER_OF.get(module)
        if tier is None:
            raise pytest.UsageError("%s has no tier: add it to TIERS in tests/conftest.py" % module)
        item.add_marker(getattr(pytest.mark, tier))
