"""Helpers of the tests (imported as ``tests.support.<module>``; no test
module imports another):

``process``        real ``twistd -n disque`` nodes, a raw RESP client, redis-cli
``ports``          the nodes' ports, one block per pytest-xdist worker
``resp``           the RESP command encoder and the error test
``memory``         nodes in memory (runtime, whole service) for the protocol tier
``sim``            pure cores wired in memory (SimCluster)
``tx``             a reactor thread for the Twisted client against real nodes
``txredis_flow``   a txredisapi producer/consumer flow, run as a process
``tls``            a throw-away PKI and TLS clients
``netns``          network namespaces (addresses beyond loopback)
``webdriver``      headless Chromium through chromedriver
``spark``          the Spark session and driver processes
``storage_faults`` a file system that fails on demand
``crash_states``   the AOF's crash states (python -m tests.support.crash_states)
``golden``         the golden transcript engine (replies of the original server)
"""
