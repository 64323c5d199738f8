"""Add orders to the ``orders`` queue of a Disque cluster, pipelined over
one connection (the connector's own blocking client).

    python examples/spark/producer.py --nodes 127.0.0.1:7711 --count 10000
"""

import argparse
import json
import random

from disque.spark.connection import Connection, ServerError, split_address


def orders(queue, count):
    for i in range(count):
        order = {"order": i, "item": random.choice(["tea", "coffee", "cake"]),
                 "quantity": random.randint(1, 5), "price": round(random.uniform(1, 9), 2)}
        yield ("ADDJOB", queue, json.dumps(order), 5000, "RETRY", 30)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="127.0.0.1:7711", help="host:port of one node")
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--count", type=int, default=10000)
    args = parser.parse_args()
    host, port = split_address(args.nodes.split(",")[0])
    sent = 0
    with Connection(host, port) as conn:
        for reply in conn.stream(orders(args.queue, args.count), 500):
            if isinstance(reply, ServerError):
                raise SystemExit("ADDJOB failed: %s" % reply)
            sent += 1
    print("added %d jobs to %s" % (sent, args.queue))


if __name__ == "__main__":
    main()
