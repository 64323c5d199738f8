"""The cluster bus wire codec: every message type round-trips, and no byte
string makes decode() do anything but return a message or raise WireError."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from disque.bus import wire
from disque.core import catalog, messages
from disque.core import options
from disque.core.job import MAX_JOB_COUNTER, MAX_JOB_SECONDS

ids = st.binary(min_size=40, max_size=40)
small = st.binary(max_size=64)
i64 = st.integers(-2**63, 2**63 - 1)
u32 = st.integers(0, 2**32 - 1)
gossip = st.tuples(ids, st.binary(max_size=255), st.integers(0, 65535), st.integers(0, 255)).map(
    lambda t: messages.Gossip(*t))
seconds = st.integers(0, MAX_JOB_SECONDS)  # DELAY, RETRY: what ADDJOB accepts
counter = st.integers(0, MAX_JOB_COUNTER)
backoffs = st.one_of(st.just((0, 0)), st.tuples(st.integers(1, options.MAX_BACKOFF_MS),
                                                 st.integers(1, options.MAX_BACKOFF_MS)).map(sorted))
job_options = st.one_of(st.none(), st.builds(
    lambda p, b, n, dl, dead: options.make(p, b[0], b[1], n, dl, *dead),
    st.integers(options.PRIORITY_MIN, options.PRIORITY_MAX), backoffs, u32, small,
    st.one_of(st.just((b"", b"")), st.tuples(st.binary(min_size=1, max_size=20), st.binary(min_size=1, max_size=20)))))
jobs = st.builds(messages.JobRecord, ids, small, st.binary(max_size=300), st.integers(0, 65535), i64, i64, seconds,
                 seconds, counter, counter, st.lists(ids, max_size=5).map(tuple), st.binary(max_size=1024),
                 job_options)
gossips = st.lists(gossip, max_size=5).map(tuple)
u64 = st.integers(0, 2**64 - 1)
catalog_entries = st.builds(catalog.Entry, st.binary(min_size=1, max_size=8), st.binary(min_size=1, max_size=20),
                            u64, st.text("0123456789abcdef", min_size=40, max_size=40).map(str.encode),
                            st.binary(max_size=40))
queue_counts = st.builds(messages.QueueCount, small, u64, u64, u64, u64, u64, u64, u64, st.integers(0, 3))

MESSAGES = st.one_of(
    st.builds(messages.Meet, gossips), st.builds(messages.Ping, gossips), st.builds(messages.Pong, gossips),
    st.builds(messages.Fail, ids), st.builds(messages.ReplJob, jobs), st.builds(messages.GotJob, ids),
    st.builds(messages.GotJobs, st.lists(ids, max_size=5).map(tuple)),
    st.builds(messages.ReplJobs, st.lists(jobs, max_size=3).map(tuple)),
    st.builds(messages.Enqueue, ids), st.builds(messages.WillQueue, ids),
    st.builds(messages.Queued, ids, st.integers(0, 2)), st.builds(messages.Working, ids),
    st.builds(messages.SetAck, ids, u32), st.builds(messages.GotAck, ids, st.booleans()),
    st.builds(messages.DelJob, ids, st.booleans()), st.builds(messages.NeedJobs, small, u32),
    st.builds(messages.YourJobs, st.lists(jobs, max_size=3).map(tuple)),
    st.builds(messages.Pause, small, st.integers(0, 3)),
    st.builds(messages.NackDelay, ids, st.integers(0, 2**64 - 1), st.booleans()),
    st.builds(messages.CountsAsk, u32, u32, small, st.booleans(), st.lists(small, max_size=4).map(tuple)),
    st.builds(messages.Counts, u32, u64, u64, u32, u32, st.lists(queue_counts, max_size=4).map(tuple),
              st.integers(0, 65535), st.booleans(), st.binary(max_size=255)),
    st.builds(messages.Settings, st.lists(catalog_entries, max_size=3).map(tuple), st.integers(0, 2)),
    st.builds(messages.SettingsSum, st.binary(min_size=20, max_size=20)),
    st.builds(messages.QDemand, st.lists(st.builds(messages.QueueDemand, small, u32, u32), max_size=4).map(tuple)),
)
HEADERS = st.builds(messages.Header, ids, st.binary(max_size=255), st.integers(0, 65535), st.integers(0, 65535))


@settings(max_examples=500)
@given(HEADERS, MESSAGES)
def test_every_message_round_trips(header, msg):
    frame = wire.encode(header, msg)
    assert wire.decode(frame) == (header, msg)


def test_every_type_is_covered_by_the_strategy():
    seen = set()

    @settings(max_examples=1000, derandomize=True)
    @given(MESSAGES)
    def collect(msg):
        seen.add(type(msg))

    collect()
    assert seen == {cls for _, cls in messages.TYPES}


@settings(max_examples=200)
@given(HEADERS, MESSAGES, st.data())
def test_truncated_or_extended_frames_are_refused(header, msg, data):
    frame = wire.encode(header, msg)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(wire.WireError):
        wire.decode(frame[:cut])
    with pytest.raises(wire.WireError):
        wire.decode(frame + data.draw(st.binary(min_size=1, max_size=8)))


@settings(max_examples=1000)
@given(st.binary(max_size=200))
def test_garbage_only_raises_wire_error(blob):
    for frame in (blob, b"DQ\x01" + blob, b"DQ\x01\x0a" + b"a" * 40 + blob):
        try:
            wire.decode(frame)
        except wire.WireError:
            pass


def _frame(version=wire.VERSION, code=2):
    return struct.pack(">2sBB40sHHB", b"DQ", version, code, b"a" * 40, 7711, 0, 0) + b"\x00\x00"


def test_versions_types_and_magic_are_checked():
    assert wire.decode(_frame()) == (messages.Header(b"a" * 40, b"", 7711, 0), messages.Ping(()))
    for bad in (_frame(version=wire.VERSION + 1), _frame(version=0), _frame(code=99), b"XX" + _frame()[2:]):
        with pytest.raises(wire.WireError):
            wire.decode(bad)


def test_counts_are_bounded_before_allocation():
    head = struct.pack(">2sBB40sHHB", b"DQ", 1, 31, b"a" * 40, 7711, 0, 0)
    with pytest.raises(wire.WireError, match="too many jobs"):
        wire.decode(head + struct.pack(">I", wire.MAX_JOBS + 1))
    with pytest.raises(wire.WireError):
        wire.encode(messages.Header(b"short", b"", 1, 0), messages.Ping(()))
    with pytest.raises(wire.WireError):
        wire.encode(messages.Header(b"a" * 40, b"", 1, 0), messages.DelJob(b"short"))


@pytest.mark.parametrize("field,value", [("delay", -1), ("retry", -1), ("retry", MAX_JOB_SECONDS + 1),
                                         ("delay", 2**63 - 1), ("nacks", -1), ("deliv", MAX_JOB_COUNTER + 1)])
def test_job_records_with_times_or_counters_out_of_range_are_refused(field, value):
    """A REPLJOB whose RETRY was 2**63 - 1 used to be accepted: SHOW and
    JSCAN then answered next-requeue-within beyond 64 bits, which clients
    cannot parse (found by tests/tools/fuzz.py --live --target bus)."""
    job = messages.JobRecord(b"D-" + b"a" * 38, b"q", b"body", 1, 0, 0, 0, 0, 0, 0, (), b"")
    header = messages.Header(b"b" * 40, b"", 7000, 0)
    assert wire.decode(wire.encode(header, messages.ReplJob(job)))[1].job == job
    frame = wire.encode(header, messages.ReplJob(job._replace(**{field: value})))
    with pytest.raises(wire.WireError, match="out of range"):
        wire.decode(frame)


@settings(max_examples=300)
@given(HEADERS, MESSAGES)
def test_version_2_frames_are_what_nodes_of_the_previous_version_read(header, msg):
    """A peer without H_EXTENSIONS gets version 2 frames: the same bytes
    as before version 3 existed (no option byte), decoding to the message
    without options; job options and NACKDELAY cannot be written in it."""
    carries_options = isinstance(msg, messages.ReplJob) and msg.job.opts is not None or \
        isinstance(msg, messages.YourJobs) and any(j.opts is not None for j in msg.jobs)
    if carries_options or isinstance(msg, messages.NackDelay):
        with pytest.raises(wire.WireError, match="version 3"):
            wire.encode(header, msg, 2)
        return
    if isinstance(msg, (messages.CountsAsk, messages.Counts)):
        for version in (2, 3):
            with pytest.raises(wire.WireError, match="version 4"):
                wire.encode(header, msg, version)
        return
    if isinstance(msg, (messages.Settings, messages.SettingsSum, messages.QDemand)):
        for version in (2, 3, 4, 5):
            with pytest.raises(wire.WireError, match="version 6"):
                wire.encode(header, msg, version)
        return
    if isinstance(msg, (messages.GotJobs, messages.ReplJobs)):
        for version in (2, 3, 4):
            with pytest.raises(wire.WireError, match="version 5"):
                wire.encode(header, msg, version)
        return
    old = wire.encode(header, msg, 2)
    assert old[2] == 2 and wire.decode(old) == (header, msg)
    new = wire.encode(header, msg, 3)
    assert new[2] == 3 and wire.decode(new) == (header, msg)
    if isinstance(msg, (messages.ReplJob, messages.YourJobs)):
        records = (msg.job,) if isinstance(msg, messages.ReplJob) else msg.jobs
        assert len(new) == len(old) + len(records)  # one 0 byte per record: "no options"
    else:
        assert new[3:] == old[3:]


def test_version_3_frames_are_what_nodes_of_the_previous_version_read():
    """Version 4 added COUNTSASK and COUNTS and changed nothing else: a
    version 3 frame of any other message is the same bytes, but for the
    version byte, and a frame claiming the new types in version 3 is
    garbage to a node of this version, as it is to one of the previous."""
    header = messages.Header(b"a" * 40, b"", 7711, 0)
    job = messages.JobRecord(b"D-" + b"a" * 38, b"q", b"body", 1, 0, 0, 0, 0, 0, 0, (), b"", options.make(priority=7))
    for msg in (messages.ReplJob(job), messages.NackDelay(b"b" * 40, 5, True), messages.Ping(())):
        v3, v4 = wire.encode(header, msg, 3), wire.encode(header, msg, 4)
        assert v3[2] == 3 and v4[2] == 4 and v3[3:] == v4[3:]
    for msg in (messages.CountsAsk(1, 10, b"", True, ()),
                messages.Counts(1, 2, 3, 4, 4, (messages.QueueCount(b"q", 1, 2, 3, 4, 5, 6, 7, 1),), 7790, False, b"")):
        frame = bytearray(wire.encode(header, msg, 4))
        assert frame[2] == 4 and wire.decode(bytes(frame))[1] == msg
        frame[2] = 3
        with pytest.raises(wire.WireError, match="unknown message type"):
            wire.decode(bytes(frame))


def test_version_4_frames_are_what_nodes_of_the_previous_version_read():
    """Version 5 added GOTJOBS and REPLJOBS and changed nothing else: a
    version 4 frame of any other message is the same bytes but for the
    version byte, and a frame of the new types in version 4 is garbage to
    a node of this version, as it is to one of the previous."""
    header = messages.Header(b"a" * 40, b"", 7711, 0)
    job = messages.JobRecord(b"D-" + b"a" * 38, b"q", b"body", 1, 0, 0, 0, 0, 0, 0, (), b"", options.make(priority=7))
    for msg in (messages.ReplJob(job), messages.GotJob(b"b" * 40), messages.CountsAsk(1, 10, b"", True, ())):
        v4, v5 = wire.encode(header, msg, 4), wire.encode(header, msg, 5)
        assert v4[2] == 4 and v5[2] == 5 and v4[3:] == v5[3:]
    for msg in (messages.GotJobs((b"b" * 40, b"c" * 40)), messages.ReplJobs((job, job._replace(id=b"D-" + b"b" * 38)))):
        frame = bytearray(wire.encode(header, msg, 5))
        assert frame[2] == 5 and wire.decode(bytes(frame))[1] == msg
        with pytest.raises(wire.WireError, match="needs bus version 5"):
            wire.encode(header, msg, 4)
        frame[2] = 4
        with pytest.raises(wire.WireError, match="unknown message type"):
            wire.decode(bytes(frame))


def test_counts_and_patterns_are_bounded():
    header = messages.Header(b"a" * 40, b"", 7711, 0)
    with pytest.raises(wire.WireError, match="too many patterns"):
        wire.encode(header, messages.CountsAsk(1, 10, b"", False, (b"x",) * (wire.MAX_PATTERNS + 1)))
    row = messages.QueueCount(b"q", 0, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(wire.WireError, match="too many queues"):
        wire.encode(header, messages.Counts(1, 0, 0, 0, 0, (row,) * (wire.MAX_COUNTS + 1), 0, False, b""))
    with pytest.raises(wire.WireError):  # a negative counter does not go on the wire
        wire.encode(header, messages.Counts(1, 0, 0, 0, 0, (row._replace(added=-1),), 0, False, b""))
    head = struct.pack(">2sBB40sHHB", b"DQ", 4, 41, b"a" * 40, 7711, 0, 0)
    with pytest.raises(wire.WireError, match="too many queues"):
        wire.decode(head + struct.pack(">IQQII", 1, 0, 0, 0, 0) + struct.pack(">I", wire.MAX_COUNTS + 1))


def test_a_version_2_frame_cannot_carry_nackdelay():
    """Type 16 did not exist in version 2: a frame claiming it is garbage."""
    header = messages.Header(b"a" * 40, b"", 7711, 0)
    frame = bytearray(wire.encode(header, messages.NackDelay(b"b" * 40, 5, True)))
    assert wire.decode(bytes(frame))[1] == messages.NackDelay(b"b" * 40, 5, True)
    frame[2] = 2
    with pytest.raises(wire.WireError, match="unknown message type"):
        wire.decode(bytes(frame))


@pytest.mark.parametrize("bad", [
    options.make(backoff=5, backoff_max=4), options.make(backoff=5, backoff_max=0),
    options.make(backoff=0, backoff_max=5), options.make(dead_from=b"q"), options.make(priority=10),
])
def test_job_options_that_break_an_invariant_are_refused(bad):
    job = messages.JobRecord(b"D-" + b"a" * 38, b"q", b"body", 1, 0, 0, 0, 0, 0, 0, (), b"", bad)
    frame = wire.encode(messages.Header(b"b" * 40, b"", 7000, 0), messages.ReplJob(job))
    with pytest.raises(wire.WireError, match="job options"):
        wire.decode(frame)


def test_version_5_frames_are_what_nodes_of_the_previous_version_read():
    """Version 6 added SETTINGS and SETTINGSSUM (the catalog) and changed
    nothing else: a version 5 frame of any other message is the same bytes
    but for the version byte, and a frame of the new types in version 5 is
    garbage to a node of this version, as it is to one of the previous;
    an entry that is no catalog entry is refused."""
    header = messages.Header(b"a" * 40, b"", 7711, 0)
    job = messages.JobRecord(b"D-" + b"a" * 38, b"q", b"body", 1, 0, 0, 0, 0, 0, 0, (), b"", options.make(priority=7))
    for msg in (messages.ReplJobs((job,)), messages.GotJob(b"b" * 40), messages.Ping(())):
        v5, v6 = wire.encode(header, msg, 5), wire.encode(header, msg, 6)
        assert v5[2] == 5 and v6[2] == 6 and v5[3:] == v6[3:]
    entry = catalog.Entry(b"schedule", b"nightly", 1234, b"c" * 40, b"value")
    for msg in (messages.Settings((entry,), messages.SETTINGS_ASK), messages.SettingsSum(b"d" * 20)):
        frame = bytearray(wire.encode(header, msg))
        assert frame[2] == 6 and wire.decode(bytes(frame))[1] == msg
        with pytest.raises(wire.WireError, match="needs bus version 6"):
            wire.encode(header, msg, 5)
        frame[2] = 5
        with pytest.raises(wire.WireError, match="unknown message type"):
            wire.decode(bytes(frame))
    with pytest.raises(wire.WireError, match="settings: catalog entry origin"):
        wire.encode(header, messages.Settings((entry._replace(origin=b"short"),), messages.SETTINGS_PUSH))
    frame = wire.encode(header, messages.Settings((entry,), messages.SETTINGS_PUSH))
    with pytest.raises(wire.WireError, match="settings: catalog entry origin"):
        wire.decode(frame.replace(b"c" * 40, b"c" * 39 + b"\n"))
    with pytest.raises(wire.WireError, match="settings: unknown mode 3"):
        wire.decode(frame[:-1] + b"\x03")
