"""GETJOB's (and QPEEK's) replies are framed by hand, one join per reply
(disque.commands.queues.render_jobs): pinned here to the shared encoders of
disque.resp.reply, for every body size and both shapes (with and without
WITHCOUNTERS).  tests/process/test_golden.py compares them with the
original's bytes."""

import pytest

from disque.commands.queues import render_jobs
from disque.resp import reply


class FakeJob:
    def __init__(self, i, size):
        self.queue = b"queue-%d" % i
        self.id = b"D-%038d" % i
        self.body = (b"\r\n*1\r\n" + bytes(range(256)))[:size] * (size // 256 + 1)
        self.body = self.body[:size]
        self.nacks = i
        self.deliv = 2 ** 40 + i


def generic(jobs, withcounters):
    items = []
    for job in jobs:
        fields = [reply.bulk(job.queue), reply.bulk(job.id), reply.bulk(job.body)]
        if withcounters:
            fields += [reply.bulk(b"nacks"), reply.integer(job.nacks),
                       reply.bulk(b"additional-deliveries"), reply.integer(job.deliv)]
        items.append(reply.array(fields))
    return reply.array(items)


@pytest.mark.parametrize("withcounters", [False, True])
@pytest.mark.parametrize("sizes", [[], [0], [100], [4096], [65536], [0, 100, 4096, 65536, 7]])
def test_render_jobs_is_the_generic_encoding(sizes, withcounters):
    jobs = [FakeJob(i, size) for i, size in enumerate(sizes)]
    out = render_jobs(jobs, withcounters)
    assert type(out) is bytes
    assert out == generic(jobs, withcounters)
