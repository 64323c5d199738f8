"""Add orders to the ``orders`` queue of a Disque cluster, pipelined over
one connection.

    python examples/spark/producer.py --nodes 127.0.0.1:7711 --count 10000
"""

import argparse
import json
import random
import socket

import hiredis


def encode(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="127.0.0.1:7711", help="host:port of one node")
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--count", type=int, default=10000)
    args = parser.parse_args()
    host, _, port = args.nodes.split(",")[0].rpartition(":")
    sock = socket.create_connection((host, int(port)))
    reader = hiredis.Reader()
    window = 500
    sent = 0
    for start in range(0, args.count, window):
        n = min(window, args.count - start)
        batch = []
        for i in range(start, start + n):
            order = {"order": i, "item": random.choice(["tea", "coffee", "cake"]),
                     "quantity": random.randint(1, 5), "price": round(random.uniform(1, 9), 2)}
            batch.append(encode("ADDJOB", args.queue, json.dumps(order), 5000, "RETRY", 30))
        sock.sendall(b"".join(batch))
        got = 0
        while got < n:
            reply = reader.gets()
            if reply is False:
                reader.feed(sock.recv(65536))
                continue
            if isinstance(reply, hiredis.ReplyError):
                raise SystemExit("ADDJOB failed: %s" % reply)
            got += 1
        sent += n
    print("added %d jobs to %s" % (sent, args.queue))


if __name__ == "__main__":
    main()
