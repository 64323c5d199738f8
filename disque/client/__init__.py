"""Clients for Disque clusters (docs/client.md).

* :class:`DisqueClient` (``disque.client.txclient``): Twisted, cluster-aware,
  on txredisapi; every command returns a Deferred.
* :class:`BlockingClient` (``disque.client.blocking``): the same commands
  and failover for scripts and threads, on plain sockets.
* :class:`~disque.worker.Worker`: a Twisted service running a handler per job.

Both clients share one definition of the command set (``commands``), the
exceptions (``errors``), the job and node records (``job``), and the choice
of node (``nodes``).  Importing this package imports neither Twisted nor
txredisapi until a client class is used.
"""

from .errors import (
    AuthError, BadId, ConnectionError, DisqueError, Leaving, MaxLen, NoJob, NoNodeAvailable,
    NoPermission, NoReplication, OutOfMemory, Paused, ProtocolMismatch, ResponseError, TLSError, TooLate,
)
from .job import Hello, Job, NodeInfo
from .tls import TLSOptions


__all__ = [
    "AuthError", "BadId", "BlockingClient", "ConnectionError", "DisqueClient", "DisqueError", "Hello",
    "Job", "Leaving", "MaxLen", "NoJob", "NoNodeAvailable", "NodeInfo", "NoPermission", "NoReplication",
    "OutOfMemory", "Paused", "ProtocolMismatch", "ResponseError", "TLSError", "TLSOptions", "TooLate",
]


def __getattr__(name):  # PEP 562: the clients load their transport on first use
    if name == "DisqueClient":
        from .txclient import DisqueClient
        return DisqueClient
    if name == "BlockingClient":
        from .blocking import BlockingClient
        return BlockingClient
    raise AttributeError(name)
