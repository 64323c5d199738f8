"""The ``none`` persistence (``persistence none``): jobs live in memory
only, and AOF cannot be switched on at run time (``CONFIG SET appendonly
yes`` is accepted and changes nothing).  The default, ``aof`` with
``appendonly no``, keeps nothing either until it is switched on (see
:mod:`disque.persistence.aof`)."""

from zope.interface import implementer

from ..interfaces import IPersistence


@implementer(IPersistence)
class NoPersistence:
    """Writes nothing, loads nothing, stays disabled."""

    enabled = False
    reactor = None
    on_error = None  # (never called: nothing can fail)

    def load(self, node):
        return 0

    def begin_load(self, node):
        return None

    def append(self, record):
        pass

    def flush(self):
        return True

    def error_text(self):
        return None

    def rewrite(self, node):
        return b"+Background append only file rewriting started\r\n"

    def info(self):
        return [
            ("loading", 0), ("aof_enabled", 0), ("aof_state", "off"),
            ("aof_rewrite_in_progress", 0), ("aof_rewrite_scheduled", 0),
            ("aof_last_rewrite_time_sec", -1), ("aof_current_rewrite_time_sec", -1),
            ("aof_last_bgrewrite_status", "ok"), ("aof_last_write_status", "ok"),
        ]

    def rewrite_now(self, node, controlled):
        pass

    def maybe_auto_rewrite(self, node):
        pass

    def set_enabled(self, enabled, node):
        pass  # stays disabled: there is nowhere to write

    def close(self):
        pass
