"""Configuration of a Disque node: the Redis-style ``disque.conf`` file, the
command-line overrides, and the state behind CONFIG GET / SET / REWRITE.

Each directive is one row of ``SPECS`` (:mod:`.specs`); its *kind*
(``KINDS``, :mod:`.kinds`) decides how arguments parse, how CONFIG GET
renders the value (byte for byte as Disque 1.0-rc1) and how CONFIG REWRITE
writes it.  :class:`Config` (:mod:`.store`) holds the values and the
appliers that make a change take effect; :mod:`.rewrite` writes the file
back; :mod:`.lexer` and :mod:`.glob` are Redis' words and patterns.  No
twisted imports.

Every directive does what it says or is refused.  A directive the node does
not implement is *fixed* (``Spec.fixed`` says why): its default, the
original's, is the only value accepted in the file or on the command line,
CONFIG SET refuses it, and CONFIG GET still lists that value where the
original lists the directive (clients and the golden replies see the
original's shape, and the value shown is the one in effect).  docs/config.md
lists every directive and what it does; tests/protocol/test_directives.py proves each
one has an effect.
"""

from .errors import ConfigError, ConfigSetError
from .glob import stringmatch
from .kinds import KINDS, Kind, Share, Spec, check_users_with
from .lexer import format_memory, parse_memory, quote, split_args
from .specs import SECRETS, SPECS, TLS_DEFAULT_PROTOCOLS, TLS_PROTOCOLS, is_secret, tls_protocol_range
from .store import Config

__all__ = ["Config", "ConfigError", "ConfigSetError", "SPECS", "split_args", "quote",
           "parse_memory", "format_memory", "stringmatch", "SECRETS", "is_secret",
           "KINDS", "Kind", "Share", "Spec", "TLS_PROTOCOLS", "TLS_DEFAULT_PROTOCOLS",
           "tls_protocol_range", "check_users_with"]
