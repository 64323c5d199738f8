"""The ranges of a job's options: what ADDJOB and NACK accept, defined once.

The node checks its arguments against these (``disque.commands.jobs``),
the bus codec and the AOF records against the same bounds
(``disque.bus.wire``, :mod:`disque.core.options`), and the clients check
their calls before sending them (``disque.client.commands``, the Spark
connector's options), so a value a client lets through is one the node
accepts, and the other way round.

Pure constants, importing nothing: the clients import this module without
importing the node.

Invariants: ``PRIORITY_MIN <= PRIORITY_DEFAULT <= PRIORITY_MAX``, all in
one byte (priority 0 means "no options" in the records); the BACKOFF and
MAXDELIVERIES bounds fit the records' u32 fields; ``MAX_NACK_DELAY_MS``
is ``MAX_JOB_SECONDS`` in ms, so every time made from them (now plus two
of them, in ms) stays within 64 bits.
"""

#: PRIORITY (an extension, docs/extensions.md): higher first; the default
#: is the middle of the range.
PRIORITY_MIN = 1
PRIORITY_MAX = 9
PRIORITY_DEFAULT = 5

#: Largest BACKOFF delay (ms): about 49 days, past any sensible TTL.
MAX_BACKOFF_MS = (1 << 32) - 1
#: Largest MAXDELIVERIES.
MAX_DELIVERIES = (1 << 32) - 1

#: Largest TTL, DELAY or RETRY (seconds): the times made from them (now plus
#: two of them, in ms) stay within 64 bits, as the bus, the AOF and clients
#: need; ADDJOB refuses more and the bus codec refuses records with more.
MAX_JOB_SECONDS = (1 << 61) // 1000
#: Largest NACK ... DELAY (ms).
MAX_NACK_DELAY_MS = MAX_JOB_SECONDS * 1000
