"""``twistd disque``: command-line options and ``makeService``.

Options override the config file; every directive of the file can also be
given as ``--set name=value`` (repeatable).  Bad files, unknown directives and
bad values stop start-up with a one-line explanation on stderr and exit
status 1 (a ``SystemExit``: for a ``UsageError`` twistd would print its whole
usage text first), never a traceback.  So do unknown strategies, argument
strings a strategy refuses and endpoint strings that do not parse: building
the node service makes them all before anything listens.  So does, once
twistd starts the service, a listener that cannot listen (a port in use:
``_report_start_failures``).  SIGTERM and SIGINT stop the node within
``disque.node.service.STOP_TIMEOUT`` seconds, and the process exits with
status 0 (``_stop_on_signals``; docs/config.md, "Starting and stopping").
``--help-strategies`` lists the strategies installed.
"""

import sys

from twisted.python import usage

from .. import print_version
# For its effect: the config checks the user lines it reads with the ACL's rules.
from ..access import acl_file  # noqa: F401
from ..config import Config, ConfigError

# Options with their own flag, mapped to config directives.
_DIRECT = [
    ("port", "p", "TCP port for clients (cluster bus: port + 10000)."),
    ("bind", "b", "Address(es) to listen on, space separated."),
    ("dir", "d", "Working directory for the AOF and the node file."),
    ("loglevel", None, "debug | verbose | notice | warning."),
    ("logfile", None, "Write the node's log lines to this file instead of twistd's log."),
    ("appendonly", None, "yes | no: enable the append only file."),
    ("appendfsync", None, "always | everysec | no."),
    ("maxmemory", None, "Memory limit, e.g. 1gb."),
    ("requirepass", None, "Password clients must AUTH with."),
    ("cluster-node-timeout", None, "Milliseconds before an unreachable node is failed."),
    ("listen", None, "Client listeners: Twisted endpoint strings, space separated "
                     "(default: port on each bind address)."),
    ("persistence", None, "Persistence strategy: aof[:args] | none | a plugin (see --help-strategies)."),
    ("federation-policy", None, "Federation policy: default[:args] | a plugin (see --help-strategies)."),
    ("http-port", None, "TCP port of the HTTP side: the dashboard, /api, /metrics (default 0: off)."),
    ("http-frontend", None, "Strategy serving the HTTP side: default | a plugin (see --help-strategies)."),
]


class Options(usage.Options):
    """``twistd disque`` options: ``--config`` names the file, every other
    option overrides one directive of it (``--set name=value`` any one);
    the resulting :class:`~disque.config.Config` is ``options.config``."""

    synopsis = "[options]"
    longdesc = ("Start a Disque node. Without --config the node uses the defaults "
                "(127.0.0.1:7711, in memory). Command-line options override the file.")
    optParameters = [["config", "c", None, "Redis-style config file (see examples/disque.conf)."]] + [
        [name, short, None, doc] for name, short, doc in _DIRECT
    ]

    helpOutput = sys.stdout  # where --help-strategies writes
    # --version: this package's version, not only Twisted's (usage.Options')
    opt_version = print_version

    def __init__(self):
        super().__init__()
        self.overrides = {}

    def opt_help_strategies(self):
        """List the strategies and endpoint types installed, then exit."""
        from ..plugins import help_text

        self.helpOutput.write(help_text({name for name, _, _ in _DIRECT}))
        raise SystemExit(0)

    def opt_set(self, assignment):
        """Override any config directive: --set name=value (repeatable)."""
        name, sep, value = assignment.partition("=")
        if not sep or not name:
            raise usage.UsageError("--set expects name=value, got %r" % assignment)
        self.overrides[name.strip()] = value

    def postOptions(self):
        for name, _, _ in _DIRECT:
            if self[name] is not None:
                self.overrides[name] = self[name]
        try:
            config = Config.from_file(self["config"]) if self["config"] else Config.defaults()
            config.apply_overrides(self.overrides)
        except ConfigError as e:
            _fail(str(e))
        except OSError as e:
            _fail("cannot read config file %r: %s" % (self["config"], e.strerror))
        self.config = config


def _fail(message):
    """Stop start-up: one line on stderr, exit status 1."""
    raise SystemExit("disque: " + message.replace("\n", " "))


def makeService(options, reactor=None):
    """The node service for ``twistd disque``; ``reactor`` (tests): the
    reactor it runs on instead of the global one."""
    if reactor is None:  # the process is ours: on PyPy, a nursery within bounds first (.nursery)
        from .nursery import bound_nursery
        bound_nursery()
    from ..interfaces import LoadError
    from .listeners import EndpointError, ListenError
    from ..plugins import StrategyError
    from .nodefile import NodeFileError
    from .service import DisqueNodeService
    from .tls import TLSError

    if options.config["port"] + 10000 > 65535:
        _fail("port %d leaves no room for the cluster bus (port + 10000)" % options.config["port"])
    if options.config["tls-cluster"] and options.config["tls-port"] + 10000 > 65535:
        _fail("tls-port %d leaves no room for the TLS cluster bus (tls-port + 10000)" % options.config["tls-port"])
    one_line = (StrategyError, EndpointError, NodeFileError, LoadError, ConfigError, TLSError, ListenError)
    if reactor is None:  # the process is ours: the lean reactor (disque.node.reactor)
        from twisted.internet import reactor as running
        from .reactor import lighten
        lighten(running)
        _stop_on_signals(running)
        _report_start_failures(one_line)
    try:
        service = DisqueNodeService(options.config, reactor=reactor)
    # ConfigError: a value the node refuses (rename-command, ...)
    # TLSError: a tls-* directive that cannot be used (a missing certificate, ...)
    except one_line as e:
        _fail(str(e))
    except OSError as e:  # a file or directory the node cannot use, not named by one of the above
        _fail("cannot start: %s: %s" % (e.filename, e.strerror or e))
    if reactor is None:
        service.when_loaded().addErrback(_load_failed, running)
    return service


def _stop_on_signals(reactor):
    """SIGTERM and SIGINT stop the node as twistd's reactor has them do
    (``reactor.stop()``: the service stops, within
    ``disque.node.service.STOP_TIMEOUT`` seconds), but for two things.
    The process then exits with status 0, as the original does on SIGTERM
    and as after SHUTDOWN (twistd would end it by the signal again).  A
    signal while the node stops is a log line, not the traceback of the
    ``ReactorNotRunning`` the reactor's own handler raises."""
    from twisted.internet.error import ReactorNotRunning

    from ..io.logs import logger
    from .service import STOP_TIMEOUT

    log = logger("disque")

    def stop(name):
        try:
            reactor.stop()
        except ReactorNotRunning:
            log.info("Received {signal} while shutting down: the node stops within {seconds:g} s of the first "
                     "signal", signal=name, seconds=STOP_TIMEOUT)
            return
        log.info("Received {signal}, shutting down", signal=name)

    def handler(name):
        def received(number, frame=None):
            reactor.callFromThread(stop, name)  # (as the reactor's: not in the signal handler)
        return received

    # The reactor installs self.sigTerm and self.sigInt when it runs.
    reactor.sigTerm = handler("SIGTERM")
    reactor.sigInt = handler("SIGINT")


def _report_start_failures(errors):
    """A listener that cannot listen (``ListenError``) fails twistd's
    start of the application, after ``makeService``: twistd removes its
    PID file (and, daemonizing, tells the waiting parent the error) and
    lets the exception end the process, where Python would print its
    traceback.  For ``errors``, each one line, the process writes that
    line to stderr and to the log instead, and exits with status 1, as for
    a config error."""
    previous = sys.excepthook
    if getattr(previous, "disque_start_failures", False):
        return

    def hook(kind, value, tb):
        if not isinstance(value, errors):
            return previous(kind, value, tb)
        from ..io.logs import logger

        line = str(value).replace("\n", " ")
        logger("disque").error("Start-up failed: {line}", line=line)
        sys.__stderr__.write("disque: %s\n" % line)
        sys.__stderr__.flush()

    hook.disque_start_failures = True
    sys.excepthook = hook


def _load_failed(failure, reactor):
    """A big AOF, loaded once the node runs, was found unusable half way:
    the service logged it and stops the reactor.  End the process as a
    start-up failure does: the same line on stderr, exit status 1 (once
    the services have stopped; twistd itself always exits with 0)."""
    import os

    sys.__stderr__.write("disque: %s\n" % str(failure.value).replace("\n", " "))

    def exit_1():
        for f in (sys.__stdout__, sys.__stderr__):
            f.flush()
        os._exit(1)

    reactor.addSystemEventTrigger("after", "shutdown", exit_1)

