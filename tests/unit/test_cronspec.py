"""A schedule's definition (disque.core.cronspec): its encoding, its checks,
and the times it fires at (cron with seconds and zones, intervals)."""

from datetime import datetime, timezone

import pytest
from hypothesis import given, strategies as st

from disque.core import options
from disque.core.cronspec import (BadSpec, ScheduleSpec, check_cron, decode_spec, encode_spec,
                                  fire_times, next_fire)

T0 = 1_795_000_000_000  # ms


def ms(*args, tz=timezone.utc):
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)


def every(every_ms=1000, anchor=T0, since=T0, **kw):
    fields = dict(paused=False, catchup=0, every_ms=every_ms, anchor=anchor, since=since, cron=b"", tz=b"",
                  queue=b"q", body=b"b", repl=0, retry=-1, ttl=600, delay=0, maxlen=0, opts=None)
    fields.update(kw)
    return ScheduleSpec(**fields)


def cron(expr, tz=b"", since=T0, **kw):
    return every(every_ms=0, cron=expr, tz=tz, since=since, **kw)


specs = st.builds(
    every, st.integers(10, 10 ** 9), st.integers(0, 2 ** 50), st.integers(0, 2 ** 50),
    paused=st.booleans(), catchup=st.integers(0, 2), queue=st.binary(min_size=1, max_size=20),
    body=st.binary(max_size=100), repl=st.integers(0, 65535), retry=st.integers(-1, 3600),
    ttl=st.integers(1, 10 ** 6), maxlen=st.integers(0, 2 ** 32 - 1),
    opts=st.one_of(st.none(), st.builds(options.make, st.integers(1, 9)))) | st.builds(
    cron, st.sampled_from([b"*/5 * * * *", b"0 9 * * 1-5", b"*/10 * * * * *", b"30 0 0 1 * *"]),
    st.sampled_from([b"", b"Europe/Paris", b"America/New_York", b"UTC"]))


@given(specs)
def test_a_spec_round_trips(spec):
    assert decode_spec(encode_spec(spec)) == spec


@given(specs, st.data())
def test_a_cut_or_padded_spec_is_refused(spec, data):
    raw = encode_spec(spec)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(BadSpec):
        decode_spec(raw[:cut])
    with pytest.raises(BadSpec):
        decode_spec(raw + b"\x00")


@pytest.mark.parametrize("spec, why", [
    (every(every_ms=5), "EVERY must be between"),
    (every(cron=b"* * * * *"), "either by CRON or EVERY"),
    (cron(b""), "either by CRON or EVERY"),
    (cron(b"61 * * * *"), "invalid CRON"),
    (cron(b"* * * *"), "CRON needs 5 fields"),
    (cron(b"* * * * *", tz=b"Mars/Olympus"), "unknown time zone"),
    (every(tz=b"UTC"), "TZ goes with CRON"),
    (every(ttl=10, delay=10), "TTL, DELAY or RETRY"),
    (every(queue=b""), "queue name is empty"),
    (every(catchup=3), "catch-up policy"),
])
def test_a_spec_out_of_bounds_is_refused(spec, why):
    with pytest.raises(BadSpec, match=why):
        decode_spec(encode_spec(spec))


def test_an_unknown_version_is_refused():
    raw = encode_spec(every())
    with pytest.raises(BadSpec, match="unknown schedule version 2"):
        decode_spec(b"\x02" + raw[1:])


def test_an_interval_fires_from_its_anchor_after_since():
    spec = every(every_ms=1000, anchor=T0, since=T0 + 2500)
    assert next_fire(spec, 0) == T0 + 3000  # nothing owed before since
    assert next_fire(spec, T0 + 3000) == T0 + 4000
    assert fire_times(spec, T0 + 3000, T0 + 6500, 10) == [T0 + 4000, T0 + 5000, T0 + 6000]
    assert fire_times(spec, T0 + 3000, T0 + 60_000, 2) == [T0 + 4000, T0 + 5000]  # the limit


def test_cron_takes_seconds_first_and_zones():
    start = ms(2026, 11, 27, 10, 0, 1)
    assert fire_times(cron(b"*/15 * * * * *", since=0), start, start + 40_000, 10) == \
        [start + 14_000, start + 29_000]  # :15 and :30 of the minute
    paris = cron(b"0 9 * * 1-5", tz=b"Europe/Paris", since=0)
    assert next_fire(paris, ms(2026, 11, 27, 10, 0)) == ms(2026, 11, 30, 8, 0)  # Monday 09:00 CET
    assert next_fire(paris, ms(2026, 6, 1, 12, 0)) == ms(2026, 6, 2, 7, 0)  # 09:00 CEST


def test_cron_across_a_daylight_saving_change_fires_once_per_wall_hour():
    """New York springs forward on 2026-03-08 (02:00 -> 03:00): a 02:30
    daily schedule has no 02:30 that day, and fires once each other day."""
    spec = cron(b"30 2 * * *", tz=b"America/New_York", since=0)
    runs = fire_times(spec, ms(2026, 3, 6), ms(2026, 3, 11), 10)
    assert len(runs) == len(set(runs)) and 4 <= len(runs) <= 5
    assert all(b - a >= 23 * 3600 * 1000 for a, b in zip(runs, runs[1:]))


def test_check_cron_says_what_is_wrong():
    assert check_cron(b"*/5 * * * *", b"") is None
    assert check_cron(b"\xff * * * *", b"") == "CRON expression is not ASCII"
    assert check_cron(b"* " * 200, b"") == "CRON expression too long"
