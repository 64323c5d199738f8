"""What a permission is about: the command categories (``CATEGORIES``),
the key a command's permission is checked against (:func:`command_key`:
``client|setname`` for the subcommands of a ``SPLIT`` command), and which
queues and job IDs a command names (``QUEUE_ARGS``, ``JOB_ARGS``).
Invariant: every command of the table is in exactly one category.  A new
command gets its category here, and its queue or job arguments if it has
any; the rules and users are :mod:`disque.access.acl`'s."""

from collections import OrderedDict

#: Commands by category; every command of the table is in exactly one
#: (CLIENT's subcommands split between @connection and @admin).
CATEGORIES = OrderedDict((
    (b"produce", (b"addjob",)),
    (b"consume", (b"getjob", b"ackjob", b"fastack", b"nack", b"working")),
    (b"inspect", (b"qlen", b"qpeek", b"qstat", b"show", b"jscan", b"qscan", b"info", b"schedule|list",
                  b"schedule|show")),
    (b"manage", (b"pause", b"qlimit", b"enqueue", b"dequeue", b"deljob", b"revive", b"schedule|add", b"schedule|del",
                 b"schedule|pause", b"schedule|resume")),
    (b"admin", (b"config", b"cluster", b"debug", b"shutdown", b"bgrewriteaof", b"acl", b"monitor",
                b"slowlog", b"latency", b"loadjob", b"client|list", b"client|kill", b"client|pause")),
    (b"connection", (b"ping", b"time", b"command", b"hello", b"auth", b"client|setname", b"client|getname",
                     b"client|id", b"client|reply", b"client|info")),
))
#: Commands whose permission is per subcommand ("client|setname").
SPLIT = frozenset(name.partition(b"|")[0] for names in CATEGORIES.values() for name in names if b"|" in name)
#: Every permission key.  An unknown subcommand of a SPLIT command is none
#: of them: only an unrestricted user runs it (and gets the command's error).
ALL_NAMES = tuple(name for names in CATEGORIES.values() for name in names)


# -- which queues and jobs a command names -----------------------------------

def _first(argv):
    return argv[1:2]


def _getjob_queues(argv):
    """GETJOB [NOHANG] [TIMEOUT ms] [COUNT n] [WITHCOUNTERS] FROM q..."""
    i, n = 1, len(argv)
    while i < n:
        opt = argv[i].lower()
        if opt == b"from":
            return argv[i + 1:]
        i += 2 if opt in (b"timeout", b"count") else 1
    return ()


def _option_queue(argv):
    """JSCAN ... QUEUE q ...: the queue it filters on, if any."""
    for i in range(1, len(argv) - 1):
        if argv[i].lower() == b"queue":
            return argv[i + 1:i + 2]
    return ()


def _all(argv):
    return argv[1:]


def _schedule_queue(argv):
    """SCHEDULE ADD name queue ...: the queue its runs go to."""
    return argv[3:4] if len(argv) > 3 and argv[1].lower() == b"add" else ()


#: command -> the queue names it takes from argv.
QUEUE_ARGS = {b"addjob": _first, b"qlen": _first, b"qpeek": _first, b"qstat": _first, b"pause": _first,
              b"qlimit": _first, b"getjob": _getjob_queues, b"jscan": _option_queue, b"schedule": _schedule_queue}
#: command -> the job IDs it takes from argv.
JOB_ARGS = {b"ackjob": _all, b"fastack": _all, b"nack": _all, b"enqueue": _all, b"dequeue": _all,
            b"deljob": _all, b"revive": _all, b"show": _first, b"working": _first}


def command_key(name: bytes, argv) -> bytes:
    """The name a permission is checked against: ``client|setname`` for
    the subcommands of a SPLIT command, else the command's name."""
    if name in SPLIT and len(argv) > 1:
        return name + b"|" + argv[1].lower()
    return name
