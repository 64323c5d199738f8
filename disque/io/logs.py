"""The node's log: which lines it writes (``loglevel``), where
(``logfile``, ``syslog-enabled``, ``syslog-ident``, ``syslog-facility``)
and the tag that says which node wrote them (``log-tag``).

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

The tag.  ``log-tag`` (default ``""``: none) is a text put in brackets
before each of the node's lines, in every destination alike (the file,
twistd's log, syslog): ``[7711] Disque ... ready``.  ``{port}`` in it
stands for the port the node advertises (the configured one until the
listeners listen), ``{id}`` for the first 8 characters of its ID (``?``
until it is known: the lines before the node file is read).  The node
service tells the log both (:meth:`NodeLog.set_tag_fields`); ``CONFIG SET
log-tag`` takes effect at once.  twistd's own lines carry no tag.

Precedence with twistd's ``-l``: it always decides where twistd's own lines
go, and moves the node's lines only while ``logfile`` is ``""``; a node
``logfile`` wins for the node's lines.

One process, one node log (twistd runs one node): the node service
configures it when it is made (:meth:`NodeLog.follow`, before the AOF is
loaded, whose progress it logs) and resets it to the defaults when it
stops.  The worker and the Twisted client log through it too (their
namespaces are ``disque.worker...`` and ``disque.client...``): in a process
of their own, such as ``twistd disque-worker``, it stays at its default,
``notice``, unless told otherwise (:meth:`NodeLog.set_level`).
"""

from twisted.logger import (FilteringLogObserver, LogLevel, LogLevelFilterPredicate, Logger, formatEvent,
                            formatEventAsClassicLogText, globalLogPublisher)

__all__ = ["LEVELS", "NodeLog", "TAG_FIELDS", "logger", "node_log"]

NAMESPACE = "disque"

#: ``loglevel`` -> the lowest Twisted level written.
LEVELS = {"debug": LogLevel.debug, "verbose": LogLevel.debug, "notice": LogLevel.info,
          "warning": LogLevel.warn}

#: What ``{name}`` may stand for in ``log-tag``.
TAG_FIELDS = ("port", "id")

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
        """Back to the defaults: notice, the process's log, no syslog, no
        tag."""
        self.set_level("notice")
        self.path = ""
        self._syslog = None
        self._template = ""
        self._fields = {}
        self.tag = ""  # the tag as written: the template with its fields replaced

    def set_level(self, name: str) -> None:
        self._predicate.setLogLevelForNamespace(NAMESPACE, LEVELS[name])

    @property
    def level(self):
        """The lowest Twisted LogLevel written."""
        return self._predicate.logLevelForNamespace(NAMESPACE)

    def follow(self, config, syslog=None) -> list:
        """Take ``logfile`` and the ``syslog-*`` directives from ``config``
        now, and ``loglevel`` and ``log-tag`` now and at each CONFIG SET.
        ``syslog``: the module to use (tests pass a fake).  Returns the
        unregister functions of the appliers (see
        :meth:`disque.config.Config.on_change`)."""
        self.path = config["logfile"]
        self._syslog = None
        if config["syslog-enabled"]:
            self._syslog = _SyslogWriter(config["syslog-ident"], config["syslog-facility"], syslog)
        return [config.on_change("loglevel", self.set_level), config.on_change("log-tag", self.set_tag)]

    def set_tag(self, template: str) -> None:
        """``log-tag``: the template of the tag (see the module docstring)."""
        self._template = template
        self._render_tag()

    def set_tag_fields(self, port=None, id=None) -> None:
        """What ``{port}`` and ``{id}`` stand for, as they become known:
        the port (an int) and the node's ID (its first 8 characters are
        shown); None leaves a field as it is."""
        if port is not None:
            self._fields["port"] = str(port)
        if id is not None:
            self._fields["id"] = id[:8]
        self._render_tag()

    def _render_tag(self):
        tag = self._template
        for name in TAG_FIELDS:
            tag = tag.replace("{%s}" % name, self._fields.get(name, "?"))
        self.tag = tag

    def _write(self, event):
        if self.tag:
            event = _tagged(event, self.tag)
        if not (self.path and _append(self.path, event)):
            globalLogPublisher(event)
        if self._syslog is not None:
            self._syslog(event)


def _tagged(event, tag):
    """A copy of ``event`` whose text starts with ``[tag]``."""
    text = event.get("log_format")
    if not text:
        return event
    tagged = dict(event)
    tagged["log_format"] = "[%s] %s" % (tag.replace("{", "{{").replace("}", "}}"), text)
    return tagged


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
