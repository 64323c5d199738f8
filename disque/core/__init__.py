"""The pure Disque state machine.

Nothing in this package may import twisted, open a socket or a file, or read
the clock: every entry point receives the current time from its caller and
reports what must happen in the outside world as *effects*
(:mod:`disque.core.effects`).  ``tests/unit/test_core_purity.py`` enforces it.
"""
