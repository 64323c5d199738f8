"""A short run of ``tests/tools/fuzz.py`` in process (the 1,000,000-input runs
are in docs/fuzzing.md), and proof that its checks catch planted bugs."""

import pytest

from disque.bus import wire
from disque.resp import codec
from tests.tools import fuzz, fuzzgen


@pytest.mark.parametrize("seed", [11, 12])
def test_the_request_parser_survives_generated_requests(seed):
    """Every input parses the same whole and split, valid ones into their
    exact argv, the rest into ProtocolError only, within the buffer bounds."""
    report = fuzz.fuzz_resp(15_000, seed)
    assert report.finding_count == 0, report.summary()
    assert set(report.by_category) == set(fuzzgen.RespGen.CATEGORIES)


@pytest.mark.parametrize("seed", [21, 22])
def test_the_bus_codec_and_a_node_core_survive_generated_frames(seed):
    report = fuzz.fuzz_bus(10_000, seed)
    assert report.finding_count == 0, report.summary()
    assert set(report.by_category) == set(fuzzgen.BusGen.CATEGORIES)


def test_generators_are_deterministic_per_seed():
    def first(gen):
        return [gen.next() for _ in range(300)]

    assert first(fuzzgen.RespGen(5)) == first(fuzzgen.RespGen(5))
    assert first(fuzzgen.RespGen(5)) != first(fuzzgen.RespGen(6))
    frames = [f for _, f, _ in first(fuzzgen.BusGen(5))]
    assert frames == [f for _, f, _ in first(fuzzgen.BusGen(5))]


def test_valid_requests_and_frames_are_what_they_claim():
    """The oracles themselves: a "valid" request is the canonical encoding
    of its argv, a "valid" frame the encoding of its message."""
    gen = fuzzgen.RespGen(7)
    for _ in range(500):
        cat, data, expected = gen.next()
        if cat == "valid":
            assert data == fuzzgen.encode_command(expected[0])
    bus = fuzzgen.BusGen(7)
    for _ in range(500):
        cat, frame, expected = bus.next()
        if cat == "valid":
            assert wire.encode(*expected) == frame


# -- the checks can fail ---------------------------------------------------------

def test_a_planted_crash_in_the_inline_splitter_is_found(monkeypatch):
    real = codec._sdssplitargs

    def broken(line):
        if b"'" in line:
            raise IndexError("planted")
        return real(line)

    monkeypatch.setattr(codec, "_sdssplitargs", broken)
    report = fuzz.fuzz_resp(3000, 1)
    assert report.finding_count > 0
    assert any("IndexError: planted" in text for _, text, _ in report.findings)


def test_a_planted_wrong_argv_is_found(monkeypatch):
    """The fast path dropping the last argument of 3-argument requests."""
    real = codec.RequestParser._fast

    def fast(self, lines, i, last, out):
        n = len(out)
        j = real(self, lines, i, last, out)
        for argv in out[n:]:
            if len(argv) == 3:
                argv.pop()
        return j

    monkeypatch.setattr(codec.RequestParser, "_fast", fast)
    report = fuzz.fuzz_resp(3000, 1)
    assert any(text.startswith(("expected", "whole")) for _, text, _ in report.findings)


def test_a_planted_unbounded_buffer_is_found(monkeypatch):
    """Lines allowed to grow past the 64 KB inline limit."""
    real = codec.RequestParser.__init__

    def init(self, *a, **k):
        real(self, *a, **k)
        self._max_inline = 1 << 30

    monkeypatch.setattr(codec.RequestParser, "__init__", init)
    report = fuzz.fuzz_resp(3000, 1)
    assert any("bytes buffered" in text for _, text, _ in report.findings), report.summary()


def test_a_planted_decoder_crash_is_found(monkeypatch):
    """The reader's bounds check removed: a truncated frame then raises
    struct.error, not WireError."""
    def take(self, n):
        pos = self.pos
        self.pos = pos + n
        return self.data[pos:pos + n]

    def unpack(self, st):
        pos = self.pos
        self.pos = pos + st.size
        return st.unpack_from(self.data, pos)

    monkeypatch.setattr(wire._Reader, "take", take)
    monkeypatch.setattr(wire._Reader, "unpack", unpack)
    report = fuzz.fuzz_bus(3000, 1, core=False)
    assert any("error" in text for _, text, _ in report.findings), report.summary()


def test_a_planted_crash_in_the_core_is_found(monkeypatch):
    from disque.core.addjob import AddJob

    def on_repljob(self, sender, msg):
        raise KeyError("planted")

    monkeypatch.setattr(AddJob, "on_repljob", on_repljob)
    report = fuzz.fuzz_bus(3000, 1)
    assert any(text.startswith("core: KeyError") for _, text, _ in report.findings), report.summary()


def test_a_seed_gives_the_same_bytes_on_every_runtime():
    """The digest of seed 9's first inputs, the same on CPython and PyPy
    (CI runs both): a run's seed reproduces it anywhere.  A change to the
    generators changes it: update it then."""
    import hashlib

    h = hashlib.sha256()
    for gen in (fuzzgen.RespGen(9), fuzzgen.BusGen(9)):
        for _ in range(3000):
            category, data, _expected = gen.next()
            h.update(category.encode() + data)
    assert h.hexdigest()[:16] == "262a28691bcf2ff2"
