"""The outcome of replaying one block.

``status`` is one of

* ``exact``: our bytes equal the captured bytes (after the substitution of
  identities, :mod:`golden.originals`);
* ``normalized``: the reply contains values that vary; a normalizer
  (:mod:`golden.normalize`) compared everything else exactly;
* ``known``: a listed difference (:mod:`golden.known`), checked as precisely
  as the difference allows;
* ``MISMATCH``: anything else; the replay test fails and shows the command,
  the expected bytes and ours.
"""

class Result:
    """One block's status, with what was sent, expected and received."""

    def __init__(self, block, status, detail="", expected=b"", ours=b"", sent=b""):
        self.block, self.status, self.detail = block, status, detail
        self.expected, self.ours, self.sent = expected, ours, sent

    def describe(self):
        return ("%s\n    %s\n    sent:     %r\n    expected: %r\n    ours:     %r" % (
            self.block.label, self.detail, self.sent[:300], self.expected[:2000], self.ours[:2000]))
