"""Producer/consumer flow against a Disque node with txredisapi (the
project's client-side library), run as a separate process by
tests/process/test_e2e_node.py so the test process never runs a reactor.

    python e2e_txredis_flow.py PORT QUEUE PRODUCERS CONSUMERS JOBS_PER_PRODUCER

Prints one JSON object: the job IDs each producer added, the (id, body)
pairs each consumer got, the ACKJOB replies, the empty-queue GETJOB reply.
"""

import json
import sys

import txredisapi
from twisted.internet import defer, task


@defer.inlineCallbacks
def main(reactor, port, queue, producers, consumers, per_producer):
    port, producers, consumers, per_producer = int(port), int(producers), int(consumers), int(per_producer)
    total = producers * per_producer
    conns = []
    for _ in range(producers + consumers):
        conn = yield txredisapi.Connection("127.0.0.1", port, reconnect=False)
        conns.append(conn)
    prod_conns, cons_conns = conns[:producers], conns[producers:]
    added = [[] for _ in range(producers)]
    got = [[] for _ in range(consumers)]
    acks = []
    state = {"delivered": 0}

    @defer.inlineCallbacks
    def produce(i):
        for k in range(per_producer):
            job_id = yield prod_conns[i].execute_command("ADDJOB", queue, "p%d-%d" % (i, k), 0)
            added[i].append(job_id)
            if k % 7 == 0:       # let consumers block now and then
                yield task.deferLater(reactor, 0.001, lambda: None)

    @defer.inlineCallbacks
    def consume(i):
        conn = cons_conns[i]
        while state["delivered"] < total:
            reply = yield conn.execute_command("GETJOB", "TIMEOUT", 500, "FROM", queue)
            if reply is None:            # timed out: only fine once all were delivered
                continue
            for q, job_id, body in reply:
                assert q == queue, reply
                got[i].append([job_id, body])
                state["delivered"] += 1
                acks.append((yield conn.execute_command("ACKJOB", job_id)))

    # Consumers first, so that most jobs go to clients already blocked.
    consumers_done = [consume(i) for i in range(consumers)]
    yield task.deferLater(reactor, 0.05, lambda: None)
    yield defer.gatherResults([produce(i) for i in range(producers)], consumeErrors=True)
    yield defer.gatherResults(consumers_done, consumeErrors=True)
    empty = yield cons_conns[0].execute_command("GETJOB", "NOHANG", "FROM", queue)
    qlen = yield cons_conns[0].execute_command("QLEN", queue)
    for conn in conns:
        yield conn.disconnect()
    print(json.dumps({"added": added, "got": got, "acks": acks, "empty": empty, "qlen": qlen}))


if __name__ == "__main__":
    task.react(main, sys.argv[1:])
