"""disque: a distributed, in-memory job queue speaking the Disque protocol.

The package is laid out as a pure core (``disque.core``: jobs, queues,
timers, no reactor, no sockets) wrapped by thin Twisted adapters
(``disque.resp``, ``disque.node.service``).  See ``docs/architecture.md``.
"""

__version__ = "0.1.0"

#: Version string reported by INFO.  The protocol follows Disque 1.0-rc1.
DISQUE_VERSION = "1.0-rc1"
