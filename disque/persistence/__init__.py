"""Persistence strategies (``persistence`` directive): the factories.

``aof`` (the default) keeps an append only file, idle with ``appendonly
no`` but ready for ``CONFIG SET appendonly yes`` and for loading the file a
controlled restart (SHUTDOWN REWRITE-AOF) wrote; ``none`` keeps jobs in
memory only, whatever ``appendonly`` says.

The factories live here, in a module that imports nothing heavy, because
the dropin (``twisted/plugins/disque_plugin.py``) lists them and every
``twistd`` run imports every dropin; each ``make`` imports its provider
module only when the node is built.
"""

from zope.interface import implementer

from ..interfaces import IPersistenceFactory
from ..plugins import integer, parse_args


@implementer(IPersistenceFactory)
class AOFPersistenceFactory:
    """``aof``: an append only file in ``dir`` (``disque.persistence.aof``);
    ``appendonly``, ``appendfilename``, ``appendfsync`` and the rewrite
    directives configure it."""

    name = "aof"
    description = "Append only file of job creations and deletions (appendonly, appendfsync, ...)."
    argStringFormat = ("rewrite-step=<jobs> (5000): jobs a rewrite writes per reactor turn; "
                       "sync-load-max=<bytes> (1048576): bigger files load while the node serves -LOADING")

    def make(self, argstring, config):
        options = parse_args(argstring, {"rewrite-step": integer(1, 10_000_000),
                                         "sync-load-max": integer(0, 1 << 62)})
        from .aof import AOFPersistence

        return AOFPersistence(config, **options)


@implementer(IPersistenceFactory)
class NoPersistenceFactory:
    """``none``: nothing is written or loaded (``disque.persistence.none``)."""

    name = "none"
    description = "Keep jobs in memory only; appendonly cannot be switched on."
    argStringFormat = "none"

    def make(self, argstring, config):
        parse_args(argstring, {})
        from .none import NoPersistence

        return NoPersistence()


aof_persistence = AOFPersistenceFactory()
no_persistence = NoPersistenceFactory()
