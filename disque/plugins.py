"""Strategies by name, in the style of ``twisted.cred.strcred``.

A strategy is chosen by a string ``"name"`` or ``"name:args"`` (the
``persistence`` and ``federation-policy`` directives).  Its factory, an
:class:`disque.interfaces.IStrategyFactory`, is found by name among the
plugins of the ``twisted.plugins`` namespace package
(:func:`twisted.plugin.getPlugins`) and makes the strategy from the
argument string and the config: :func:`make_strategy` is the one way
strategies come to be.  Third parties ship their own dropin module.

Argument strings are ``key=value`` pairs separated by commas
(``aof:rewrite-step=1000``); :func:`parse_args` reads them for every
factory, so an unknown key, a repeated key or a bad value is refused with
the same kind of message whoever wrote the factory.

This module stays cheap to import (dropins import it): no reactor, nothing
from the node.
"""

import textwrap

from .interfaces import IFederationPolicyFactory, IHTTPFrontendFactory, IPersistenceFactory

#: Every kind of strategy: (factory interface, the directive choosing it).
KINDS = (
    (IPersistenceFactory, "persistence"),
    (IFederationPolicyFactory, "federation-policy"),
    (IHTTPFrontendFactory, "http-frontend"),
)


class StrategyError(ValueError):
    """An unknown strategy name or an argument string its factory refuses;
    ``str()`` is one line for the operator."""


def directive_of(interface) -> str:
    for kind, directive in KINDS:
        if kind is interface:
            return directive
    return interface.__name__


def strategies(interface):
    """All factories providing ``interface`` found in ``twisted.plugins``,
    by name."""
    from twisted.plugin import getPlugins

    return sorted(getPlugins(interface), key=lambda factory: factory.name)


def find_strategy(interface, name: str):
    """The factory of ``interface`` called ``name``; StrategyError if none."""
    found = strategies(interface)
    for factory in found:
        if factory.name == name:
            return factory
    known = ", ".join(f.name for f in found) or "none installed"
    raise StrategyError("unknown %s %r (available: %s)" % (directive_of(interface), name, known))


def split_spec(spec: str):
    """``"name:args"`` -> ``(name, args)``; ``"name"`` -> ``(name, "")``."""
    name, _, args = spec.partition(":")
    return name, args


def make_strategy(interface, spec: str, config):
    """The strategy ``spec`` (``"name[:args]"``) asks for, made by its
    factory; StrategyError, naming the directive and the spec, if the name
    is unknown or the factory refuses the arguments."""
    name, args = split_spec(spec)
    factory = find_strategy(interface, name)
    try:
        return factory.make(args, config)
    except StrategyError as e:
        raise StrategyError("%s %r: %s (arguments: %s)" % (directive_of(interface), spec, e,
                                                           factory.argStringFormat)) from None


def parse_args(argstring: str, accepted) -> dict:
    """``"a=1,b-c=x"`` -> ``{"a": ..., "b_c": ...}``.

    ``accepted`` maps each key the factory takes to a function turning the
    value text into the value (raising ValueError with what the value must
    be).  Keys come back with ``-`` as ``_`` so they can be passed as
    keyword arguments.  Refused (StrategyError): an item without ``=``, an
    unknown key, a key given twice, a bad value."""
    options = {}
    for item in argstring.split(",") if argstring else ():
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise StrategyError("expected key=value, got %r" % item)
        if key not in accepted:
            raise StrategyError("unknown argument %r" % key)
        name = key.replace("-", "_")
        if name in options:
            raise StrategyError("argument %r given twice" % key)
        try:
            options[name] = accepted[key](text.strip())
        except ValueError as e:
            raise StrategyError("bad value %r for %r: %s" % (text, key, e)) from None
    return options


def integer(lo: int, hi: int):
    """An ``accepted`` converter for :func:`parse_args`: an integer in
    ``lo..hi``."""

    def convert(text):
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not lo <= value <= hi:
            raise ValueError("must be an integer between %d and %d" % (lo, hi))
        return value

    return convert


def help_text(options=()) -> str:
    """``twistd disque --help-strategies``: every strategy found, per kind,
    with its description and argument format; then the endpoint types the
    listeners and the bus accept.  ``options``: the directives that have
    an option of their own (``--persistence``); the others are given with
    ``--set``."""
    lines = ["Strategies are chosen as name or name:key=value,key=value", ""]
    for interface, directive in KINDS:
        flag = "--%s" % directive if directive in options else "--set %s=..." % directive
        lines.append("%s (%s, or '%s' in the config file):" % (directive, flag, directive))
        found = strategies(interface)
        width = max([len(f.name) for f in found] + [8])
        for factory in found:
            lines.append("  %-*s  %s" % (width, factory.name, factory.description))
            lines += textwrap.wrap("arguments: %s" % factory.argStringFormat, 100,
                                   initial_indent=" " * (width + 4), subsequent_indent=" " * (width + 6),
                                   break_on_hyphens=False)  # sync-load-max stays whole
        if not found:
            lines.append("  (none installed)")
        lines.append("")
    server, client = endpoint_types()
    lines += [
        "Listeners are Twisted endpoint strings (escape ':' in addresses as '\\:'):",
        "  listen, cluster-listen   server endpoints: %s" % ", ".join(server),
        "  cluster-connect          client endpoints, without host and port (added per peer): %s"
        % ", ".join(client),
        "",
    ]
    return "\n".join(lines)


def endpoint_types():
    """(server, client) endpoint type names: Twisted's built-in ones and
    those of endpoint parser plugins installed."""
    from twisted.internet.interfaces import (IStreamClientEndpointStringParserWithReactor,
                                             IStreamServerEndpointStringParser)
    from twisted.plugin import getPlugins

    server = ["tcp", "ssl", "unix"] + [p.prefix for p in getPlugins(IStreamServerEndpointStringParser)]
    client = ["tcp", "ssl", "unix"] + [p.prefix for p in getPlugins(IStreamClientEndpointStringParserWithReactor)]
    return sorted(set(server)), sorted(set(client))
