"""The process tier's fixtures: real nodes, and the Spark session."""

import pytest

from tests.support.process import NodeProcess, start_cluster


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


@pytest.fixture
def trio(tmp_path):
    """Three fresh real nodes in a full mesh, killed after the test."""
    nodes = start_cluster(tmp_path, 3)
    yield nodes
    for n in nodes:
        n.kill()


@pytest.fixture
def pair(tmp_path):
    """Two fresh real nodes in a full mesh, killed after the test."""
    nodes = start_cluster(tmp_path, 2)
    yield nodes
    for n in nodes:
        n.kill()


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


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """Three real nodes in a full mesh, shared by one test module (tests use
    their own queue names)."""
    nodes = start_cluster(tmp_path_factory.mktemp("spark-cluster"), 3)
    yield nodes
    for n in nodes:
        n.stop()
