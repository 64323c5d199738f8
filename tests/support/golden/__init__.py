"""Golden replay: the original server's transcripts, replayed byte for byte.

/work/shared/reference/*.md hold raw replies captured from the original
Disque 1.0-rc1.  Each file is replayed, in file order, against fresh real
nodes of ours, sending exactly the captured bytes after substituting the
identities that differ on every run: job IDs (learned from our replies:
ADDJOB, and wherever a reply carries an ID the transcript did not show being
created, e.g. a GETJOB woken by another client), node IDs (learned with
CLUSTER MYID, and C's new ID after CLUSTER RESET HARD from the "myself" line
of CLUSTER NODES), ports, the node's directory and client addresses.  IDs
are 40 bytes, so lengths do not change; for the others RESP lengths are
recomputed.

Each reply is then exact, normalized, a known difference or a mismatch
(:mod:`golden.result`).  In the cluster the varying values are normalized
too:

* CLUSTER NODES: lines compared as a set (the original lists nodes in the
  order of its hash table of random IDs); pong_received is a recent ms
  timestamp (0 exactly where the original says 0); ping_sent of a healthy
  link may be a PING sent within the last 2 s and not answered yet (the
  original shows 0 a moment later); a handshake node's ID is a random
  temporary one on both sides (any 40 hex digits);
* CLUSTER INFO: cluster_stats_messages_sent/received are counters (an
  integer, positive where the original's is; ours may count the MEET
  already sent when the original's cron had not yet); the rest exact;
* HELLO: the version and our ID exact, the node entries as a set (hash
  table order again);
* SHOW / JSCAN records: nodes-delivered and nodes-confirmed as sets (hash
  table order); where the replication level leaves a choice (REPLICATE 2 in
  a 3-node cluster) the replica is picked at random, so the set must have
  the original's size, contain the answering node (it holds a copy) and the
  job's creator exactly when the original's does, and otherwise only nodes
  of the cluster; next-requeue-within / next-awake-within shrink with the
  time since the job was created or delivered (bounded by our record's
  ctime), and for an acked job next-awake-within is the next GC attempt
  (at most a few seconds away); a record the original showed a while after
  creating the job (cluster.md's final JSCAN: its ttl is more than 3 s
  below the TTL the job ID encodes) has our ttl counted down from that TTL
  by our job's age, as our replay runs at its own pace;
* random choices of our server the later blocks depend on:
  ``scenario.EXPECTED_ADJUST`` (which copy the leaving node C has queue its
  job).

The federation section (NEEDJOBS / YOURJOBS) is replayed like the others.

Where things are:

* ``transcript``: the transcript format, parsed into blocks; the files replayed;
* ``resp``: typed RESP values (parse, encode, field accessors);
* ``originals``: the original's identities the replay substitutes;
* ``conn``: the raw client connection;
* ``replayer``: the engine (routing, substitution, comparison);
* ``scan``: SCAN iterations, compared as a whole;
* ``normalize``: how replies whose values vary are compared;
* ``scenario``: the tables of what the transcripts say in words;
* ``known``: the table of known differences and their checks;
* ``result``: the statuses.

The checks are ``tests/process/test_golden.py`` (the replay, against real node
processes; run with ``-s`` for the per-file summary),
``tests/unit/test_golden_transcripts.py`` (the transcripts themselves) and
``tests/unit/test_golden_engine.py`` (the engine's comparisons, without a node).
"""
