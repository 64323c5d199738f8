"""Settings: the node's copy of the catalog (:mod:`disque.core.catalog`),
kept alike on every node, persisted, and applied by the parts that own
each kind of entry (schedules, queue limits).

How an entry reaches every node:

* **A change** made here (:meth:`Settings.change`) is stamped, merged, written
  to the AOF and sent at once to every known peer that reads bus version 6
  (SETTINGS).
* **A link that comes up** (a node that joins, restarts, or a partition that
  heals) gets this node's whole catalog as an ASK, on the first
  cron once the link is up and the peer has said it reads version 6: the
  peer merges it and answers with the entries this node lacks or holds
  older (an ANSWER, sent even when empty).  Both ends do it, so after one
  exchange both hold the merge of the two, and each knows which peers
  answered (or asked: their whole catalog came) since it last asked
  (:attr:`Settings.answered`); it asks again every ``SUM_PERIOD_MS`` a
  peer that has not (a message lost with a link).
* **Anti-entropy.** Every ``SUM_PERIOD_MS`` the node sends the digest of its
  catalog (SETTINGSSUM) to one reachable peer, each in turn; a peer whose digest
  differs asks with its whole catalog, which brings the
  two together as above.  A message lost to a dropped link is repaired
  within a few periods, link changes or not.

Merging is last-writer-wins per key (``Catalog.merge``): commutative,
associative, idempotent.  So whatever the order entries travel in, two
nodes that have exchanged their catalogs hold the same one, and a change
made on each side of a partition converges, after it heals, to the same
winner on every node.

Applying: a part registers ``hook(entry)`` for its kind with :meth:`on`; it
is called for every entry of that kind that wins here (tombstones
included), whether it came from a command, a peer or the AOF, and never for
one that loses.  Hooks must not raise on a well-formed entry; an entry
whose value its kind cannot read (a newer version's) is kept and passed on
unchanged, and the hook ignores it.

Nothing here reads a clock: the node's ``now`` (ms) stamps changes.
"""

from . import messages
from .catalog import Catalog, Entry, check
from .effects import Persist

SUM_PERIOD_MS = 1000  # anti-entropy: one digest to one peer per period
MAX_ENTRIES_PER_MESSAGE = 512  # a whole catalog goes out in messages of at most this many entries


class Settings:
    def __init__(self, node):
        self.node = node
        self.catalog = Catalog()
        self.hooks = {}  # kind -> hook(entry)
        self.changes = 0  # entries that won here (from anywhere): INFO
        self._last_sum = 0
        self._turn = 0  # whose turn for the digest: the peers in turn (the node's rng is left to the jobs)
        # Peers that answered our last ASK (SETTINGS_ANSWER): their catalog
        # and ours were merged both ways since.  A schedule fires nothing
        # before the peers it can hear have answered (disque.core.recurring).
        self.answered = set()

    def handlers(self) -> dict:
        return {messages.Settings: self.on_settings, messages.SettingsSum: self.on_sum}

    def on(self, kind: bytes, hook) -> None:
        """Call ``hook(entry)`` for every entry of ``kind`` that wins here."""
        self.hooks[kind] = hook

    def get(self, kind: bytes, name: bytes):
        return self.catalog.get(kind, name)

    # -- changes made here ---------------------------------------------------

    def change(self, kind: bytes, name: bytes, value: bytes) -> Entry:
        """Set ``(kind, name)`` to ``value`` (b"": delete it) cluster-wide:
        the new entry wins here at once and is on its way to every peer."""
        node = self.node
        entry = Entry(kind, name, self.catalog.next_stamp(kind, name, node.now), node.my_id, value)
        check(entry)
        self._publish(entry)  # (stamped past what is held: it wins)
        return entry

    def advance(self, kind: bytes, name: bytes, stamp: int, value: bytes) -> bool:
        """Progress (the last run of a schedule): set ``(kind, name)`` to
        ``stamp`` unless an entry at or past it is held; True if it won.
        Sent to every peer like a change."""
        return self._publish(Entry(kind, name, stamp, self.node.my_id, value))

    # -- the AOF --------------------------------------------------------------

    def load(self, entry: Entry) -> None:
        """An entry read from the AOF: merged and applied, not rewritten
        nor sent (peers learn it from the exchange when links come up)."""
        if self.catalog.merge(entry):
            self._apply(entry)

    def entries(self):
        """Every entry held (tombstones included), for an AOF rewrite."""
        return list(self.catalog.entries.values())

    # -- the bus -------------------------------------------------------------

    def on_settings(self, sender: bytes, msg) -> None:
        entries = self.catalog.entries
        ours_newer = []
        for entry in msg.entries:
            if self.catalog.merge(entry):
                self._persist(entry)
                self._apply(entry)
            elif msg.mode == messages.SETTINGS_ASK:
                held = entries.get(entry.key)
                if held is not None and held != entry:
                    ours_newer.append(held)
        if msg.mode == messages.SETTINGS_ASK:
            theirs = {e.key for e in msg.entries}
            ours_newer.extend(e for k, e in entries.items() if k not in theirs)
            self._send(sender, ours_newer, messages.SETTINGS_ANSWER)
            self.answered.add(sender)  # its whole catalog is merged here: as good as an answer
        elif msg.mode == messages.SETTINGS_ANSWER:
            self.answered.add(sender)

    def on_sum(self, sender: bytes, msg) -> None:
        if msg.digest != self.catalog.digest():
            self._ask(sender)

    def cron(self) -> None:
        """Exchange catalogs on links that came up; every ``SUM_PERIOD_MS``
        the digest to one reachable peer, each in turn (anti-entropy)."""
        node = self.node
        for peer in node.cluster.peers():
            if peer.connected and peer.settings and not peer.settings_synced and not peer.handshake:
                peer.settings_synced = True
                self._ask(peer.id)
        if node.now - self._last_sum < SUM_PERIOD_MS:
            return
        self._last_sum = node.now
        for peer in node.cluster.peers():  # an ASK or its answer lost with a link: ask again
            if peer.connected and peer.settings and peer.settings_synced and peer.id not in self.answered:
                self._ask(peer.id)
        peers = sorted(n.id for n in node.cluster.peers()
                       if n.settings and n.reachable and n.connected and not n.handshake)
        if peers:
            self._turn += 1
            node.cluster.send(peers[self._turn % len(peers)], messages.SettingsSum(self.catalog.digest()))

    def resync(self) -> None:
        """Exchange catalogs with every peer again, as if every link had just
        come up (this node was paused: what it holds may be stale), and
        forget which peers answered: :attr:`answered` fills again."""
        self.answered.clear()
        for peer in self.node.cluster.peers():
            peer.settings_synced = False

    # -- internals ---------------------------------------------------------------

    def _publish(self, entry: Entry) -> bool:
        """An entry made here: merged, and if it wins, persisted, applied
        and sent to every peer; True if it won."""
        if not self.catalog.merge(entry):
            return False
        self._persist(entry)
        self._apply(entry)
        self._send_all((entry,))
        return True

    def _persist(self, entry: Entry) -> None:
        node = self.node
        if node.persist:
            node.outbox.append(Persist((b"CATALOG", entry)))

    def _apply(self, entry: Entry) -> None:
        self.changes += 1
        hook = self.hooks.get(entry.kind)
        if hook is not None:
            hook(entry)

    def _send_all(self, entries) -> None:
        for peer in self.node.cluster.peers():
            if peer.settings and not peer.handshake:
                self._send(peer.id, entries, messages.SETTINGS_PUSH)

    def _ask(self, node_id: bytes) -> None:
        self.answered.discard(node_id)
        self._send(node_id, self.catalog.entries.values(), messages.SETTINGS_ASK)

    def _send(self, node_id: bytes, entries, mode: int) -> None:
        """``entries`` to ``node_id`` in messages of at most
        ``MAX_ENTRIES_PER_MESSAGE``; an ASK or ANSWER always goes, empty or
        not, and only its last message carries the mode (the ones before
        are pushes), so the peer answers, or counts the answer, once."""
        send = self.node.cluster.send
        entries = tuple(entries)
        last = (len(entries) - 1) // MAX_ENTRIES_PER_MESSAGE * MAX_ENTRIES_PER_MESSAGE if entries else 0
        for i in range(0, last, MAX_ENTRIES_PER_MESSAGE):
            send(node_id, messages.Settings(entries[i:i + MAX_ENTRIES_PER_MESSAGE], messages.SETTINGS_PUSH))
        if entries or mode != messages.SETTINGS_PUSH:
            send(node_id, messages.Settings(entries[last:], mode))
