"""The node's logging, below every layer that logs: the protocols, the
bus, persistence, the commands and the runtime all log through it.

* ``node_log``: the node's log -- :func:`~disque.logs.node_log.logger`
  makes each module's Logger, :data:`~disque.logs.node_log.node_log`
  filters the lines (``loglevel``) and sends them where the config says
  (``logfile``, syslog).
* ``limit``: a line a minute per key (:class:`~disque.logs.limit.LogLimit`),
  for what a stranger can repeat at will.

Imports nothing of the project: the config reaches ``node_log`` as an
argument (:meth:`~disque.logs.node_log.NodeLog.follow`).
"""
