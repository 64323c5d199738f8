"""The ``none`` persistence (``persistence none``): jobs live in memory
only, and AOF cannot be switched on at run time.  The default provider is
``aof`` with ``appendonly no``, which keeps nothing either until it is
switched on (see :mod:`disque.persistence.aof`)."""

from zope.interface import implementer

from ..interfaces import IPersistence, IPersistenceFactory


@implementer(IPersistence)
class NoPersistence:
    enabled = False

    def load(self, node):
        return 0

    def append(self, record):
        pass

    def flush(self):
        pass

    def rewrite(self, node):
        return b"+Background append only file rewriting started\r\n"

    def info(self):
        return [
            ("loading", 0), ("aof_enabled", 0), ("aof_state", "off"),
            ("aof_rewrite_in_progress", 0), ("aof_rewrite_scheduled", 0),
            ("aof_last_rewrite_time_sec", -1), ("aof_current_rewrite_time_sec", -1),
            ("aof_last_bgrewrite_status", "ok"), ("aof_last_write_status", "ok"),
        ]

    def close(self):
        pass


@implementer(IPersistenceFactory)
class NoPersistenceFactory:
    name = "none"
    description = "Keep jobs in memory only."
    argStringFormat = "No arguments."

    def makePersistence(self, argstring, config):
        return NoPersistence()


factory = NoPersistenceFactory()
