"""Golden replay: every transcript of the original server, replayed against
fresh real nodes of ours (``twistd -n disque``), every reply compared (see
``tests/support/golden/__init__.py`` for what is compared and how).

Run with ``-s`` to see the per-file summary.
"""

import pytest

from tests.support.golden.replayer import Replayer
from tests.support.golden.resp import parse_replies
from tests.support.golden.transcript import FILES, parse_file


@pytest.mark.parametrize("file,stop_at", FILES, ids=[f for f, _ in FILES])
def test_golden(file, stop_at, tmp_path):
    blocks = parse_file(file, stop_at=stop_at)
    assert blocks, file
    r = Replayer(file, tmp_path)
    try:
        r.run(blocks)
    finally:
        r.close()
    counts = {}
    for res in r.results:
        counts[res.status] = counts.get(res.status, 0) + 1
    replayed = {res.block.index for res in r.results}
    replies = sum(len(parse_replies(res.block.reply)) for res in r.results)
    print("\n%s: %d blocks, %d replies, %s; known differences used: %s" % (
        file, len(blocks), replies, ", ".join("%s %d" % kv for kv in sorted(counts.items())),
        sorted(r.known_used)))
    assert replayed == {b.index for b in blocks}, "blocks not replayed: %r" % sorted(
        {b.index for b in blocks} - replayed)
    bad = [res for res in r.results if res.status == "MISMATCH"]
    assert not bad, "%d of %d blocks differ from the original:\n\n%s" % (
        len(bad), len(blocks), "\n\n".join(res.describe() for res in bad))
