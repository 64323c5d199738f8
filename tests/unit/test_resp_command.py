"""The one RESP command encoder (disque.resp.command): canonical, read back
as written by the node's request parser, and the bytes the append only
file writes for its records from templates."""

import zlib

import pytest
from hypothesis import given, strategies as st

from disque.core.job import ACTIVE, Job, serialize
from disque.persistence import records
from disque.resp.codec import RequestParser
from disque.resp.command import encode_command


def parsed(data: bytes):
    p = RequestParser()
    p.feed(data)
    return p.parse()


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=8))
def test_the_parser_reads_back_every_command_line(argv):
    assert parsed(encode_command(argv)) == [argv]


@given(st.lists(st.binary(max_size=40), max_size=8))
def test_the_encoding_is_canonical_and_its_length_known(argv):
    data = encode_command(argv)
    assert data == b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)
    assert records.encoded_len(argv) == len(data)


def test_text_numbers_and_buffers_are_written_as_their_bytes():
    assert encode_command(("ADDJOB", "qué", 0, -12, True, bytearray(b"ba"), memoryview(b"mv"))) == \
        encode_command([b"ADDJOB", "qué".encode(), b"0", b"-12", b"1", b"ba", b"mv"])


def test_other_values_are_refused_before_anything_is_written():
    with pytest.raises(TypeError):
        encode_command(["PING", 1.5])
    with pytest.raises(TypeError):
        encode_command(["PING", None])


def test_the_aof_records_are_the_commands_it_names():
    job = Job(b"D-%038d" % 7, b"q", b"body\r\n", ACTIVE, 1, 1000, 10 ** 12, 0, 1, 0)
    data = serialize(job)
    assert records.record_bytes((records.LOADJOB, job)) == \
        encode_command([b"LOADJOB", data, b"%08x" % zlib.crc32(b"LOADJOB" + data)])
    assert records.record_bytes((records.DELJOB, job.id)) == \
        encode_command([b"DELJOB", job.id, b"%08x" % zlib.crc32(b"DELJOB" + job.id)])
    assert records.MARKER == encode_command([records.RESTART])
