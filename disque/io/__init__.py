"""How every layer reaches the outside world, below all of them: the protocols,
the bus, persistence, the ACL, the commands and the runtime use it.

* :mod:`.files`: the one door to the disk (the AOF, the node file, the ACL
  file, CONFIG REWRITE and check_aof write through it; a fault injector can
  stand in for it in tests).
* :mod:`.batch_output`: output held back and written once per batch of
  work, mixed into both the RESP and the bus protocols.
* :mod:`.logs`: the node's log -- :func:`~disque.io.logs.logger` makes each
  module's Logger, :data:`~disque.io.logs.node_log` filters the lines
  (``loglevel``) and sends them where the config says (``logfile``, syslog).
* :mod:`.log_limit`: a line a minute per key
  (:class:`~disque.io.log_limit.LogLimit`), for what a stranger can repeat
  at will.

Invariant: nothing here imports anything of the project (the config reaches
the log as an argument: :meth:`~disque.io.logs.NodeLog.follow`).
"""
