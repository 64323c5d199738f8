"""Take jobs from a Disque cluster without Twisted (a script, a thread).

    python examples/client/blocking_consumer.py [--nodes 127.0.0.1:7711,...] [--queue orders]

Prints each job and acknowledges it; stops when the queue stays empty for
a second.
"""

import argparse

from disque.client import BlockingClient


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", default="127.0.0.1:7711")
    parser.add_argument("--queue", default="orders")
    args = parser.parse_args()
    with BlockingClient(args.nodes.split(",")) as client:
        while True:
            jobs = client.get_jobs(args.queue, count=10, timeout=1000)
            if not jobs:
                break
            for job in jobs:
                print(job.id, job.body.decode())
                client.ack(job)


if __name__ == "__main__":
    main()
