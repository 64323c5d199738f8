"""The tiers, the fixtures every tier shares, and the node logs of a failed
test.

A test module's tier is the folder it is in, and its marker: ``unit`` (the
pure core and codecs), ``sim`` (cores wired in memory by SimCluster),
``protocol`` (the Twisted adapters in memory), ``process`` (real node,
redis-cli or Spark processes).  ``slow`` marks the longest process tests on
top.  A test module outside the four folders is a collection error.  The
fast tiers alone: ``pytest tests/unit tests/sim tests/protocol`` (or
``-m "not process"``).  Helpers live in ``tests/support/``; no test module
imports another.
"""

import ast
import platform

import pytest

from tests.support import process

TIERS = ("unit", "sim", "protocol", "process")

# Test modules that cannot run on a runtime, with the reason.  They are
# reported as skipped, never silently left out.
PYPY = platform.python_implementation() == "PyPy"
_SPARK = ("test_spark_bulk", "test_spark_docs", "test_spark_options", "test_spark_read", "test_spark_recovery",
          "test_spark_units", "test_spark_workers", "test_spark_write")
NOT_ON_THIS_RUNTIME = dict(dict.fromkeys(_SPARK, (
    "the Spark connector needs pyspark with pyarrow, and pyarrow publishes no PyPy build "
    "(Spark runs its Python workers on CPython): these tests run on CPython")), test_heap=(
    "CPython's heap policy (cycle collector, gc.freeze): PyPy has neither, and the node "
    "makes no freezer there (test_directives checks the directive is fixed at 0)")) if PYPY else {}


class _SkippedModule(pytest.Module):
    def collect(self):
        # The module's name in the reason: pytest-xdist reports a collection
        # skip once per distinct reason, and each module counts.
        pytest.skip("%s: %s" % (self.path.name, NOT_ON_THIS_RUNTIME[self.path.stem]))


def tier_of(path):
    """The tier of a test module (a path), from its folder, or None."""
    parent = path.parent
    if parent.parent.name == "tests" and parent.name in TIERS:
        return parent.name
    return None


def imported_test_modules(path):
    """The test modules (``test_*``, or anything under a tier folder) that
    the module at ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + ["%s.%s" % (node.module, alias.name) for alias in node.names]
        else:
            continue
        found += [name for name in names if name.split(".")[-1].startswith("test_")
                  or any(name.startswith("tests.%s" % tier) for tier in TIERS)]
    return found


def pytest_pycollect_makemodule(module_path, parent):
    if tier_of(module_path) is None:
        raise pytest.UsageError("%s is in no tier: test modules live in tests/{%s}/"
                                % (module_path, ",".join(TIERS)))
    imported = imported_test_modules(module_path)
    if imported:
        raise pytest.UsageError("%s imports the test module(s) %s: shared helpers go in tests/support/"
                                % (module_path, ", ".join(imported)))
    if module_path.stem in NOT_ON_THIS_RUNTIME:
        return _SkippedModule.from_parent(parent, path=module_path)
    return None


# --- parallel runs (pytest-xdist: -n N) ------------------------------------------
# Unit, sim and protocol tests are handed to workers one by one.  A
# process-tier module runs whole on one worker, in its order: its module
# fixtures (a cluster, a PKI) are built once, and its tests never run beside
# each other.  (The grouping is this scheduler's, not --dist loadgroup's:
# pytest-xdist 3.8 groups by rewriting node IDs, which pytest 9.2 no longer
# reads, so xdist_group marks are silently ignored there.)  Each worker
# running Spark tests has its own SparkSession.  Ports come from each
# worker's block (tests/support/ports.py); namespaces and iptables chains
# are named by process.  The longest modules (measured with --durations)
# are handed out first, so none starts last.
LONGEST_FIRST = ("test_faults_suite", "test_spark_recovery", "test_e2e_client", "test_e2e_tls", "test_spark_options",
                 "test_spark_read", "test_e2e_cluster", "test_e2e_http", "test_e2e_extensions", "test_e2e_aof",
                 "test_spark_write", "test_e2e_dashboard", "test_e2e_worker")


def scope_of(nodeid):
    """The unit a worker is handed: a process-tier module whole, any other
    test alone."""
    path = nodeid.split("::", 1)[0]
    return path if path.startswith("tests/process/") else nodeid


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "load":  # -n alone; an explicit --dist is obeyed
        return None
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return scope_of(nodeid)

    config.option.loadscopereorder = False  # the collection order below
    return TierScheduling(config, log)


def _order(item):
    tier = tier_of(item.path)
    stem = item.path.stem
    return (TIERS.index(tier) != 3, LONGEST_FIRST.index(stem) if stem in LONGEST_FIRST else len(LONGEST_FIRST))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.path)))
    items.sort(key=_order)  # stable: a module's tests keep their order


# --- the node logs of a failed test ----------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    process.STARTED.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for node in process.nodes_to_show():
            report.sections.append(("node log %s:%d (%s)" % (node.host, node.port, node.logpath), node.log_tail()))
