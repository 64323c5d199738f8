"""twistd and strategy dropin for disque.  Keep it cheap: no heavy imports.

``twistd -n disque --config disque.conf`` starts a node; the built-in
strategy providers below are found by name with ``twisted.plugin.getPlugins``.
"""

from twisted.application.service import ServiceMaker

from disque.interfaces import (IBusTransportFactory, IClientTransportFactory, IFederationPolicyFactory,
                               IPersistenceFactory)
from disque.plugins import LazyStrategy

disque = ServiceMaker(
    "disque",
    "disque.tap",
    "A Disque node: distributed, in-memory job queue (RESP on port 7711).",
    "disque",
)

persistence_none = LazyStrategy(
    IPersistenceFactory, "none", "Keep jobs in memory only.", "No arguments.",
    "disque.persistence.none:factory",
)

transport_tcp = LazyStrategy(
    IClientTransportFactory, "tcp", "Plain TCP (the default).", "No arguments.",
    "disque.transports:tcp",
)

bus_transport_tcp = LazyStrategy(
    IBusTransportFactory, "tcp", "Plain TCP cluster bus (the default).", "No arguments.",
    "disque.transports:bus_tcp",
)

federation_default = LazyStrategy(
    IFederationPolicyFactory, "default", "The original's NEEDJOBS/YOURJOBS algorithm.", "No arguments.",
    "disque.federation.default:factory",
)

persistence_aof = LazyStrategy(
    IPersistenceFactory, "aof", "Append only file of job creations and deletions.",
    "No arguments (appendfilename, appendfsync, ... come from the config).",
    "disque.persistence.aof:factory",
)
