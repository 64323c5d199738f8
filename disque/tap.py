"""``twistd disque``: command-line options and ``makeService``.

Options override the config file; every directive of the file can also be
given as ``--set name=value`` (repeatable).  Bad files, unknown directives and
bad values stop start-up with a one-line explanation on stderr and exit
status 1 (a ``SystemExit``: for a ``UsageError`` twistd would print its whole
usage text first), never a traceback.
"""

from twisted.python import usage

from .config import Config, ConfigError

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
    ("persistence", None, "Persistence strategy: none | aof[:args] | a plugin name."),
    ("federation-policy", None, "Federation policy plugin name."),
]


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = ("Start a Disque node. Without --config the node uses the defaults "
                "(127.0.0.1:7711, in memory). Command-line options override the file.")
    optParameters = [["config", "c", None, "Redis-style config file (see examples/disque.conf)."]] + [
        [name, short, None, doc] for name, short, doc in _DIRECT
    ]

    def __init__(self):
        super().__init__()
        self.overrides = {}

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
        from .plugins import StrategyNotFound, check_strategies

        try:
            check_strategies(config)
        except StrategyNotFound as e:
            _fail(str(e))
        self.config = config


def _fail(message):
    """Stop start-up: one line on stderr, exit status 1."""
    raise SystemExit("disque: " + message.replace("\n", " "))


def makeService(options):
    from .persistence.aof import AOFError
    from .service import DisqueNodeService, NodeFileError

    if options.config["port"] + 10000 > 65535:
        _fail("port %d leaves no room for the cluster bus (port + 10000)" % options.config["port"])
    try:
        return DisqueNodeService(options.config)
    except (NodeFileError, ConfigError) as e:  # ConfigError: a value the node refuses (rename-command, ...)
        _fail(str(e))
    except AOFError as e:
        text = str(e)
        if "check_aof" not in text:
            text += "; inspect or repair it with: python -m disque.tools.check_aof [--fix] <file>"
        _fail("cannot load the append only file: %s" % text)

