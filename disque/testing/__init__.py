"""Public fakes for tests and plugin authors.

Two in-memory clusters, for two kinds of test:

* :class:`SimCluster` (``sim``): pure cores, no reactor, no bytes: for the
  state machine, message by message;
* :class:`IOSimCluster` (``iosim_cluster``): real node services
  (``DisqueNodeService``) speaking the real RESP and bus protocols to each
  other over ``twisted.test.iosim``, on memory reactors with a shared fake
  clock: for what crosses the wire (a plugin's effect on a whole node, the
  bus codec, links, timers), with :class:`IOSimClient` (``client``) as
  their clients.

    from disque.testing import SimCluster, IOSimCluster

``encode_command`` is :func:`disque.resp.command.encode_command` (the
command line as one sequence), exported here for tests that write raw
requests.
"""

from ..resp.command import encode_command
from .client import ErrorReply, IOSimClient
from .iosim_cluster import IOSimCluster
from .sim import BASE_PORT, HOST, SimCluster, SimLink

__all__ = ["BASE_PORT", "ErrorReply", "HOST", "IOSimClient", "IOSimCluster", "SimCluster", "SimLink",
           "encode_command"]
