"""The node runtime: everything between the pure core (``disque.core``) and
the reactor.

``service.DisqueNodeService`` is the embedding API (a Twisted
``MultiService``)::

    from disque.config import Config
    from disque.node.service import DisqueNodeService
    DisqueNodeService(Config.defaults()).setServiceParent(application)

Importing this package imports nothing: the bus links import the few
modules they share with the runtime (``tls``, ``heap``) without loading
the rest of it; the node's log, the batched output and the file layer live
below every layer (``disque.logs``, ``disque.batch_output``,
``disque.files``).
"""
