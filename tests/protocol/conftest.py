"""The protocol tier's fixture: whole node services in memory."""

import pytest

from tests.support.memory import Node


@pytest.fixture
def make(tmp_path):
    """make(**directives) -> a started Node in its own directory; every node
    is stopped at the end of the test."""
    nodes = []

    def factory(start=True, **directives):
        node = Node(tmp_path / ("n%d" % len(nodes)), directives, start)
        nodes.append(node)
        return node

    yield factory
    for node in nodes:
        if node.service.running:
            node.service.stopService()
