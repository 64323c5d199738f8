"""The node's log: which lines it writes (``loglevel``) and where
(``logfile``, ``syslog-enabled``, ``syslog-ident``, ``syslog-facility``).

Every module of the node logs through a Logger made by :func:`logger`, whose
observer is :data:`node_log`: the one place that filters the node's lines
and sends them on.  Twisted's and twistd's own lines (start-up, reactor,
unhandled errors) do not pass through it and go wherever twistd sends them.

Levels.  The original has four, Twisted five; the mapping is
``warning`` -> warn and above, ``notice`` -> info and above, ``verbose``
and ``debug`` -> everything.  Twisted has a single level below info, so the
node logs its "verbose" lines (an idle client closed, ...) at debug, and
``verbose`` and ``debug`` show the same lines.  ``CONFIG SET loglevel``
takes effect at once (a LogLevelFilterPredicate on the ``disque``
namespace).

Destinations, decided at start-up as in the original (CONFIG SET refuses
``logfile`` and the ``syslog-*`` directives):

* ``logfile ""`` (the default): the process's log, Twisted's global log
  publisher.  Under ``twistd`` that is where twistd logs: standard output
  with ``-n``, else ``twistd.log``, or the file of twistd's own
  ``-l``/``--logfile`` option, or syslog with twistd's ``--syslog``.
* ``logfile <path>``: appended to that file instead, one line per event in
  Twisted's text format; the file is opened for each line, as the original
  does, so moving it away (log rotation) simply starts a new one.  If it
  cannot be written the line goes to the process's log.
* ``syslog-enabled yes``: also to syslog, with ``syslog-ident`` and
  ``syslog-facility``; debug lines at LOG_DEBUG, info at LOG_NOTICE, warn at
  LOG_WARNING, error at LOG_ERR, critical at LOG_CRIT.

Precedence with twistd's ``-l``: it always decides where twistd's own lines
go, and moves the node's lines only while ``logfile`` is ``""``; a node
``logfile`` wins for the node's lines.

One process, one node log (twistd runs one node): the node service
configures it when it is made (:meth:`NodeLog.follow`, before the AOF is
loaded, whose progress it logs) and resets it to the defaults when it
stops.
"""

from twisted.logger import (FilteringLogObserver, LogLevel, LogLevelFilterPredicate, Logger, formatEvent,
                            formatEventAsClassicLogText, globalLogPublisher)

__all__ = ["LEVELS", "NodeLog", "logger", "node_log"]

NAMESPACE = "disque"

#: ``loglevel`` -> the lowest Twisted level written.
LEVELS = {"debug": LogLevel.debug, "verbose": LogLevel.debug, "notice": LogLevel.info,
          "warning": LogLevel.warn}

_SYSLOG_PRIORITY = {LogLevel.debug: "LOG_DEBUG", LogLevel.info: "LOG_NOTICE", LogLevel.warn: "LOG_WARNING",
                    LogLevel.error: "LOG_ERR", LogLevel.critical: "LOG_CRIT"}


class NodeLog:
    """The observer of every node Logger: drops the events below
    ``loglevel``, writes the others to the destinations above.  Invariant:
    between :meth:`follow` and :meth:`reset` it reflects the config, and
    outside them it is the default (notice, to the process's log)."""

    def __init__(self):
        self._predicate = LogLevelFilterPredicate(defaultLogLevel=LogLevel.debug)
        self._filter = FilteringLogObserver(self._write, [self._predicate])
        self.reset()

    def __call__(self, event):
        self._filter(event)

    def reset(self) -> None:
        """Back to the defaults: notice, the process's log, no syslog."""
        self.set_level("notice")
        self.path = ""
        self._syslog = None

    def set_level(self, name: str) -> None:
        self._predicate.setLogLevelForNamespace(NAMESPACE, LEVELS[name])

    @property
    def level(self):
        """The lowest Twisted LogLevel written."""
        return self._predicate.logLevelForNamespace(NAMESPACE)

    def follow(self, config, syslog=None) -> list:
        """Take ``logfile`` and the ``syslog-*`` directives from ``config``
        now, and ``loglevel`` now and at each CONFIG SET.  ``syslog``: the
        module to use (tests pass a fake).  Returns the unregister functions
        of the appliers (see :meth:`disque.config.Config.on_change`)."""
        self.path = config["logfile"]
        self._syslog = None
        if config["syslog-enabled"]:
            self._syslog = _SyslogWriter(config["syslog-ident"], config["syslog-facility"], syslog)
        return [config.on_change("loglevel", self.set_level)]

    def _write(self, event):
        if not (self.path and _append(self.path, event)):
            globalLogPublisher(event)
        if self._syslog is not None:
            self._syslog(event)


def _append(path, event) -> bool:
    """Append the event to the file at ``path``; False if it cannot."""
    text = formatEventAsClassicLogText(event)
    if text is None:
        return True
    try:
        with open(path, "a", encoding="utf-8", errors="replace") as f:
            f.write(text)
    except OSError:
        return False
    return True


class _SyslogWriter:
    """Events to syslog(3), through the ``syslog`` module."""

    def __init__(self, ident, facility, module=None):
        if module is None:
            import syslog as module
        self.module = module
        code = module.LOG_USER if facility == "user" else getattr(module, "LOG_" + facility.upper())
        module.openlog(ident, module.LOG_PID | module.LOG_NDELAY, code)

    def __call__(self, event):
        text = formatEvent(event)
        if text:
            level = event.get("log_level", LogLevel.info)
            self.module.syslog(getattr(self.module, _SYSLOG_PRIORITY.get(level, "LOG_NOTICE")), text)


#: The node's log (see the module docstring).
node_log = NodeLog()


def logger(namespace: str) -> Logger:
    """A Logger for a module of the node (``namespace`` starts with
    ``disque``): its events go through :data:`node_log`."""
    return Logger(namespace=namespace, observer=node_log)
