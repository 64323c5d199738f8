"""The node runtime: everything between the pure core (``disque.core``) and
the reactor.

``service.DisqueNodeService`` is the embedding API (a Twisted
``MultiService``)::

    from disque.config import Config
    from disque.node.service import DisqueNodeService
    DisqueNodeService(Config.defaults()).setServiceParent(application)

Importing this package imports nothing.  Nothing below the runtime
imports it: what the protocols, the bus and persistence share with it lives
below them (``disque.io``: the log, batched output, the files),
and the links get what they need of ``tls`` and ``heap`` from the service
that makes them (``BusConnector.tls_error_text``, the freezer's
``frozen_cycles_released``).
"""
