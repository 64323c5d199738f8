"""``twistd disque-worker``: run a :class:`~disque.worker.Worker` from the
command line.

    twistd -n disque-worker --handler myapp.jobs:handle --queues orders,mail \\
        --nodes 10.0.0.1:7711,10.0.0.2:7711 --concurrency 8

The handler is imported when the options are read (the current directory
first on ``sys.path``, as ``python -m`` does), so a typo stops start-up
with one line, not a traceback once jobs arrive.  Like ``twistd disque``, a
bad option stops with one line on stderr and status 1 (``SystemExit``;
twistd would print its whole usage text for a ``UsageError``).
``--loglevel`` (``notice`` by default, as a node's) filters the worker's and
its client's lines (disque.io.logs); twistd's own lines go as twistd
decides.
"""

import importlib
import os
import sys
from typing import Callable

from twisted.python import usage

from .. import print_version
from ..io.logs import LEVELS


def load_handler(spec: str) -> Callable:
    """``package.module:function`` (or ``:Class.method``) -> the callable."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise usage.UsageError("--handler must look like package.module:function, not %r" % spec)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target = importlib.import_module(module_name)
    except ImportError as e:
        raise usage.UsageError("--handler %s: cannot import %s: %s" % (spec, module_name, e))
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise usage.UsageError("--handler %s: %s has no %r" % (spec, module_name, attr))
    if not callable(target):
        raise usage.UsageError("--handler %s: %r is not callable" % (spec, attr))
    return target


def _at_least(lowest, name):
    def check(value):
        number = int(value)
        if number < lowest:
            raise ValueError("%s must be at least %d" % (name, lowest))
        return number
    return check


def _positive(name):
    return _at_least(1, name)


def _non_negative(name):
    return _at_least(0, name)


class Options(usage.Options):
    synopsis = "--handler package.module:function --queues q1[,q2...] [options]"
    longdesc = ("Runs the handler for every job of the queues: ACK when it returns, NACK when it "
                "raises, WORKING while it runs long (docs/client.md).")
    optParameters = [
        ["handler", None, None, "package.module:function called with each job (required)."],
        ["queues", "q", None, "Comma-separated queues to take jobs from, in order of preference (required)."],
        ["nodes", None, "127.0.0.1:7711", "Comma-separated host:port of nodes to start from."],
        ["concurrency", "c", 1, "Jobs handled at once.", _positive("--concurrency")],
        ["fetch-timeout", None, 1000, "GETJOB TIMEOUT in milliseconds (how fast a stop is noticed).",
         _positive("--fetch-timeout")],
        ["stop-timeout", None, None, "Seconds to wait for running jobs when stopping (default: all of them).",
         float],
        ["nack-delay", None, None, "Milliseconds a failed job waits before it is queued again (NACK ... DELAY; "
         "default: at once, or the job's BACKOFF).", _non_negative("--nack-delay")],
        ["username", None, None, "User to log in as (AUTH username password; default: the default user, "
         "or $DISQUE_USERNAME)."],
        ["password", None, None, "Password for AUTH (default: $DISQUE_PASSWORD, which ps does not show)."],
        ["tls-ca-cert-file", None, None, "CA certificate to check the nodes' TLS certificates with (TLS on)."],
        ["tls-cert-file", None, None, "Client certificate for nodes with tls-auth-clients."],
        ["tls-key-file", None, None, "Key of --tls-cert-file."],
        ["loglevel", None, "notice", "debug | verbose | notice | warning: the lowest level of the worker's and "
         "its client's lines written (as a node's loglevel)."],
    ]
    optFlags = [
        ["threads", None, "Run the handler in a thread pool (for handlers that block)."],
        ["fast-ack", None, "Acknowledge with FASTACK instead of ACKJOB."],
    ]
    # --version: this package's version, not only Twisted's (usage.Options')
    opt_version = print_version

    def postOptions(self):
        try:
            self._check()
        except usage.UsageError as e:
            raise SystemExit("disque-worker: %s" % e)

    def _check(self):
        if not self["handler"]:
            raise usage.UsageError("--handler is required (package.module:function)")
        if not self["queues"]:
            raise usage.UsageError("--queues is required")
        if self["loglevel"] not in LEVELS:
            raise usage.UsageError("--loglevel must be one of %s" % ", ".join(LEVELS))
        self["handler"] = load_handler(self["handler"])
        self["queues"] = [q for q in self["queues"].split(",") if q]
        self["nodes"] = [n for n in self["nodes"].split(",") if n]
        for option, variable in (("username", "DISQUE_USERNAME"), ("password", "DISQUE_PASSWORD")):
            if self[option] is None:
                self[option] = os.environ.get(variable) or None
        if (self["tls-cert-file"] or self["tls-key-file"]) and not (self["tls-cert-file"] and self["tls-key-file"]):
            raise usage.UsageError("--tls-cert-file and --tls-key-file go together")


def makeService(options):
    from ..client.tls import TLSOptions
    from ..io.logs import node_log
    from . import Worker

    node_log.set_level(options["loglevel"])  # the process's disque lines: the worker's, its client's

    client_options = {"username": options["username"], "password": options["password"]}
    if options["tls-ca-cert-file"] or options["tls-cert-file"]:
        client_options["tls"] = TLSOptions(options["tls-ca-cert-file"], options["tls-cert-file"],
                                           options["tls-key-file"])
    return Worker(options["handler"], options["queues"], nodes=options["nodes"],
                  concurrency=options["concurrency"], fetch_timeout=options["fetch-timeout"],
                  threads=options["threads"], fast_ack=options["fast-ack"],
                  stop_timeout=options["stop-timeout"], client_options=client_options,
                  nack_delay=options["nack-delay"])
