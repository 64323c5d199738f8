"""twistd and strategy dropin for disque.  Keep it cheap: no heavy imports.

``twistd -n disque --config disque.conf`` starts a node;
``twistd -n disque-worker --handler pkg.mod:fn --queues q`` a worker.  The built-in
strategy factories are listed here, not described: each states its name,
description and argument format itself, and imports its provider only when
it makes one (``disque.persistence``, ``disque.federation``).
``twistd disque --help-strategies`` shows them all, third parties' included.
"""

from twisted.application.service import ServiceMaker

from disque.federation import default_policy
from disque.http import default_frontend
from disque.persistence import aof_persistence, no_persistence

disque = ServiceMaker(
    "disque",
    "disque.node.tap",
    "A Disque node: distributed, in-memory job queue (RESP on port 7711).",
    "disque",
)

disque_worker = ServiceMaker(
    "disque-worker",
    "disque.worker.tap",
    "A worker: runs a handler for every job of Disque queues (ACK, NACK, WORKING).",
    "disque-worker",
)

__all__ = ["disque", "disque_worker", "aof_persistence", "no_persistence", "default_policy",
           "default_frontend"]
