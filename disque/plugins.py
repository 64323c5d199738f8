"""Find strategy factories (persistence, client transport, federation) by name.

Providers are plugins in the ``twisted.plugins`` namespace package, found
with :func:`twisted.plugin.getPlugins`; third parties ship their own dropin
module.  Built-in providers are declared in ``twisted/plugins/disque_plugin.py``
through :class:`LazyStrategy`, so discovering plugins imports nothing heavy.
"""

import importlib

from zope.interface import alsoProvides


class StrategyNotFound(LookupError):
    pass


class LazyStrategy:
    """A factory declaration that imports its real provider on first use.

    ``target`` is ``"module:attribute"`` naming the real factory object; every
    attribute not defined here is looked up on it.
    """

    def __init__(self, interface, name, description, argStringFormat, target):
        self.name = name
        self.description = description
        self.argStringFormat = argStringFormat
        self._target = target
        self._real = None
        from twisted.plugin import IPlugin

        alsoProvides(self, IPlugin, interface)

    def _load(self):
        if self._real is None:
            module, _, attr = self._target.partition(":")
            self._real = getattr(importlib.import_module(module), attr)
        return self._real

    def __getattr__(self, attr):
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._load(), attr)


def strategies(interface):
    """All providers of ``interface`` found in ``twisted.plugins``."""
    from twisted.plugin import getPlugins

    return list(getPlugins(interface))


def find_strategy(interface, name: str):
    found = strategies(interface)
    for factory in found:
        if factory.name == name:
            return factory
    known = ", ".join(sorted(f.name for f in found)) or "none installed"
    raise StrategyNotFound("unknown %s %r (available: %s)" % (interface.__name__, name, known))


def persistence_spec(config):
    """(name, argstring) of the persistence strategy the config asks for."""
    # The AOF provider also serves appendonly no: it stays idle but can be
    # switched on with CONFIG SET appendonly yes, and it loads the file a
    # controlled restart (SHUTDOWN REWRITE-AOF) wrote.  "persistence none"
    # opts out of all of it.
    spec = config["persistence"] or "aof"
    name, _, args = spec.partition(":")
    return name, args


def check_strategies(config):
    """Fail early (at option parsing) when a configured strategy is missing."""
    from .interfaces import IFederationPolicyFactory, IPersistenceFactory

    find_strategy(IPersistenceFactory, persistence_spec(config)[0])
    find_strategy(IFederationPolicyFactory, config["federation-policy"].partition(":")[0])
