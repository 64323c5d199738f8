"""What a command handler and a client protocol agree on, besides the
encoded reply (``bytes``, built with :mod:`disque.resp.reply`).

A handler returns one of three things, and every protocol that runs
commands (RESP, the HTTP side) handles all three:

* ``bytes``: the reply, byte for byte the original's; answered in order.
* :data:`BLOCKED`: the handler parked its client (GETJOB with no job); the
  reply comes later through ``client.conn.deliver(payload)`` and the
  requests pipelined behind it wait until then.
* a :class:`ReplySlot`: a reply to come, kept in its place in the
  output order, that does not hold up the requests behind it.

A client's ``reply_mode`` (CLIENT REPLY) says whether the protocol writes
a command's reply: the ``REPLY_*`` modes below.

Invariant: this module imports nothing.  It is a seam, as
:mod:`disque.interfaces` is: it belongs neither to the commands nor to an
adapter, so the commands, the runtime and every protocol import it from
below them, and no protocol reaches into the command layer for it.
"""

BLOCKED = object()
"""The handler parked its client (GETJOB with no job): the reply comes
later through ``deliver``, and the requests pipelined behind it wait."""


class ReplySlot:
    """A reply to come, in its place in the connection's output order,
    that does not hold up the requests behind it (ADDJOB waiting for its
    copies: pipelined ADDJOBs replicate concurrently, replies stay in
    order).

    The core fills it through a ``Reply(slot, payload)`` effect: the
    adapter calls ``slot.conn.deliver(payload)``, so the slot is its own
    ``conn``.  ``proto`` is the protocol that owns the output order: it
    must offer ``slot_filled()``, called once, when the payload arrives."""

    __slots__ = ("proto", "payload")

    def __init__(self, proto):
        self.proto = proto
        self.payload = None

    @property
    def conn(self):
        return self

    def deliver(self, payload):
        if self.payload is None:
            self.payload = payload
            self.proto.slot_filled()


# CLIENT REPLY modes: whether the protocol writes a command's reply.
REPLY_ON = 0
REPLY_OFF = 1
REPLY_SKIP = 2  # skip the reply of this command, then back to ON
REPLY_SKIP_NEXT = 3  # set by CLIENT REPLY SKIP: skip the *next* command
