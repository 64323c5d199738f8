"""The process tier's fixtures: real nodes, and the Spark session."""

import pytest

from tests.support.process import NodeProcess, mesh_fixture


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


# Real clusters: fresh for each test (a module may shadow one with its own
# mesh_fixture, e.g. one mesh shared by the module's tests).
trio = mesh_fixture(3)
pair = mesh_fixture(2)


# --- Spark connector (tests/process/test_spark_*.py) --------------------------------

@pytest.fixture(scope="session")
def spark_session():
    """ONE local[2,4] SparkSession for every Spark test, ``disque`` registered."""
    from tests.support.spark import make_session

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


# Three real nodes shared by one Spark test module (tests use their own queue names).
spark_cluster = mesh_fixture(3, scope="module")
