"""Configuration of a Disque node (see :mod:`disque.config.store`)."""

from .store import *  # noqa: F401,F403
from .store import KINDS, TLS_DEFAULT_PROTOCOLS, TLS_PROTOCOLS, Kind, Share, Spec, tls_protocol_range  # noqa: F401
