"""disque: a distributed, in-memory job queue speaking the Disque protocol.

The package is laid out as a pure core (``disque.core``: jobs, queues,
timers, no reactor, no sockets) wrapped by thin Twisted adapters
(``disque.resp``, ``disque.node.service``).  See ``docs/architecture.md``.
"""

#: The package's version, the one source of it: setup.cfg reads it
#: (``version = attr: disque.__version__``), ``twistd disque --version`` and
#: INFO's ``package_version`` show it.  0.x until a release declares the
#: Python API (clients, worker, strategy interfaces) stable (README, Versions).
__version__ = "0.1.0"

#: The Disque protocol version the node follows, which INFO reports as
#: ``disque_version`` exactly as the original does (clients read it).
DISQUE_VERSION = "1.0-rc1"


def version_text() -> str:
    """One line for ``--version``: this package, the protocol it follows,
    and what it runs on."""
    import platform

    from twisted import copyright

    return "disque %s (Disque protocol %s), Twisted %s, %s %s" % (
        __version__, DISQUE_VERSION, copyright.version, platform.python_implementation(),
        platform.python_version())


def print_version(options=None):
    """Print the versions of disque, its Disque protocol, Twisted and Python, and exit."""
    import sys

    sys.stdout.write(version_text() + "\n")
    raise SystemExit(0)
