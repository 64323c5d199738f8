"""Add jobs to a Disque cluster from a Twisted program.

    python examples/client/producer.py [--nodes 127.0.0.1:7711,...] [--queue orders] [--count 10]

Prints the ID of each job.  Any node of the cluster will do as a start:
the client finds the others with HELLO and moves on by itself if its node
dies or leaves.
"""

import argparse

from twisted.internet import defer, task

from disque.client import DisqueClient


@defer.inlineCallbacks
def main(reactor, nodes, queue, count):
    client = DisqueClient(nodes.split(","))
    for i in range(count):
        job_id = yield client.add_job(queue, b"order %d" % i, retry=30)
        print(job_id)
    yield client.disconnect()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="127.0.0.1:7711")
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args()
    task.react(main, (args.nodes, args.queue, args.count))
