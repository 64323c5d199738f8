"""The fault suite and the fuzzers: long runs from the command line (from
the repository's root, ``python -m tests.tools.faults ...``, ``python -m
tests.tools.fuzz ...``; docs/reliability.md, docs/fuzzing.md), short runs
in the tests.

``faults``     the fault-injection suite (``faultcheck`` its checker,
               ``netfilter`` its partitions, ``faultdisk`` and ``faultnode``
               its storage nemeses)
``fuzz``       generated hostile requests and bus frames (``fuzzgen``) against
               the parsers and a live node
"""
