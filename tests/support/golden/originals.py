"""The original server's identities, as the transcripts show them.

They differ on every run of ours (IDs are random, ports are free ports,
directories are temporary), so the replayer substitutes ours for them in
what it sends and in the replies it expects.  Job and node IDs keep their
length (40 bytes); ports and addresses may not, so those replies are
re-encoded.
"""

import re

# The single node of every transcript (and of cluster.md's first part).
ORIGINAL_NODE_ID = b"33f36033a560e0980d7d71c8fc8c0db81156cc5e"
ORIGINAL_PORT = b"7911"
ORIGINAL_DIR = b"/srv/disque/7911x"

# The 3-node sections of cluster.md: tag letter -> (original port, original
# node ID).  C's ID after CLUSTER RESET HARD is learned from the reply.
ORIGINAL_CLUSTER = {
    "A": (b"7912", b"a79cedd469334da389570835231e423b68431d47"),
    "B": (b"7913", b"7534ec2ddbb6aec8784ff6fb3e21e82e60e76052"),
    "C": (b"7914", b"af0e5b0c7954bac55af9aba36af3fe520f5170e4"),
}
CLUSTER_TAG = re.compile(r"\A([ABC]):(\d+)\Z")

# Client addresses the original printed (admin.md): the main connection
# (CLIENT LIST, MONITOR lines) and the victim of CLIENT KILL.
ORIGINAL_MAIN_ADDR = b"127.0.0.1:42874"
ORIGINAL_VICTIM_ADDR = b"127.0.0.1:42894"

# Jobs of cluster.md that tables name.
# The job C adds while leaving (REPLICATE 2: copies on A and B, none on C);
# C tells one copy, picked at random, to queue it.  The original picked A.
LEAVING_JOB = b"D-af0e5b0c-K4nsrMYnJ54o6BjRkcyd3ZYp-05a1"
# The job B imports from A by federation (NEEDJOBS / YOURJOBS).
FEDERATED_JOB = b"D-a79cedd4-IH8ioitq6ipFRdSAQOK9veKT-05a1"

JOB_ID = re.compile(rb"D-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}")
JOB_ID_FULL = re.compile(rb"\AD-[0-9a-f]{8}-[A-Za-z0-9+/]{24}-[0-9a-f]{4}\Z")
NODE_ID = re.compile(rb"\A[0-9a-f]{40}\Z")
