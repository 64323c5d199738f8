"""Ports for the nodes the tests start, safe under parallel test workers.

Each pytest-xdist worker (``PYTEST_XDIST_WORKER`` = ``gw0``, ``gw1``...)
hands out client ports from its own block of :data:`BLOCK` ports in
``FIRST`` .. ``FIRST + SPAN``; a node's cluster bus is its port + 10000,
so bus ports fall in ``FIRST + 10000`` .. ``FIRST + 10000 + SPAN``, which
no worker's client ports reach.  Both ranges lie below the kernel's
ephemeral range (``/proc/sys/net/ipv4/ip_local_port_range``, 32768 and up
by default), so no outgoing connection's local port takes one either.
Within its block a worker starts at a random offset (two runs of the suite
side by side rarely meet) and checks that both ports are free before it
hands them out, and a port comes round again only after all the others.
"""

import os
import random
import socket

FIRST = 10000  #: the first client port of worker 0
SPAN = 10000  #: client ports: FIRST .. FIRST + SPAN - 1; bus ports: + 10000
BUS_OFFSET = 10000
WORKERS = 10  #: blocks: workers gw10 and up share gw0's, and so on
BLOCK = SPAN // WORKERS


def worker_index(name=None):
    """0 for ``gw0`` or a run without workers, 3 for ``gw3``..."""
    name = name if name is not None else os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    digits = name[2:] if name.startswith("gw") else ""
    return int(digits) % WORKERS if digits.isdigit() else 0


def _free(port):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class PortBlock:
    """The ports of one worker, handed out in turn: ``take()`` gives a
    port whose bus port is free too, and a port comes round again only
    after every other of the block (two calls made before either port is
    bound, a node to start and then another, never get the same one)."""

    def __init__(self, index):
        self.start = FIRST + index * BLOCK
        self.next = random.randrange(BLOCK)

    def take(self):
        for _ in range(BLOCK):
            port = self.start + self.next
            self.next = (self.next + 1) % BLOCK
            if _free(port) and _free(port + BUS_OFFSET):
                return port
        raise RuntimeError("no free port pair left in %d..%d" % (self.start, self.start + BLOCK - 1))


_BLOCK = []


def free_port():
    """A free client port of this worker's block whose bus port (+10000)
    is free too (see :class:`PortBlock`)."""
    if not _BLOCK:
        _BLOCK.append(PortBlock(worker_index()))
    return _BLOCK[0].take()
