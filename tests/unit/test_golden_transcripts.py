"""The golden transcripts themselves: every block parses, and its reply has
the announced size and is canonical RESP, so that the replay, which compares
replies re-encoded from typed values where identities had to be replaced,
loses nothing the bytes would show."""

import pytest

from tests.support.golden.resp import encode, parse_replies
from tests.support.golden.transcript import FILES, ParseError, parse_file, parse_text


@pytest.mark.parametrize("file", sorted({f for f, _ in FILES}))
def test_transcript_is_well_formed(file):
    """Every block (cluster.md: all of it) parses, its reply has the
    announced size and is canonical RESP."""
    blocks = parse_file(file)
    assert blocks
    for b in blocks:
        replies = parse_replies(b.reply)
        assert len(replies) == b.n_replies, b.label
        assert b"".join(encode(v) for v in replies) == b.reply, b.label
        assert b.sent or b.command.startswith("(read pending output"), b.label


SAMPLE = """## Section
### Sub
**a title**
```
> ADDJOB q body 0
sent:  b'*4\\r\\n$6\\r\\nADDJOB\\r\\n$1\\r\\nq\\r\\n$4\\r\\nbody\\r\\n$1\\r\\n0\\r\\n'
reply: (%d bytes, nothing more within 0.5s, connection open)
  b'+D-00000000-000000000000000000000000-0001\\r\\n'
```
(a prose line)
```
> SET
sent:  b'AB'... (5 bytes)
reply: (0 bytes, connection closed by server)
```
"""


def test_blocks_carry_their_headings_notes_and_prose():
    first, second = parse_text(SAMPLE % 43)
    assert (first.section, first.subsection, first.title) == ("Section", "Sub", "a title")
    assert first.reply == b"+D-00000000-000000000000000000000000-0001\r\n"
    assert first.nothing_more_within == 0.5 and not first.closed_by_server
    assert second.prose == ["a prose line"] and second.closed_by_server
    assert second.sent == b"ABBBB" and second.sent_truncated  # the prefix's last byte repeated


def test_a_reply_of_another_size_than_announced_is_refused():
    with pytest.raises(ParseError, match="reply is 43 bytes, header says 42"):
        parse_text(SAMPLE % 42)
