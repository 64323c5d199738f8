import pytest

from support import NodeProcess


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
