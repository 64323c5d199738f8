"""Twisted's own assertions on Deferreds (``SynchronousTestCase``'s
``successResultOf``, ``failureResultOf``, ``assertNoResult``) for pytest
tests: the result of a Deferred that has fired, or a failure naming what
it was."""

from twisted.trial.unittest import SynchronousTestCase

_CASE = SynchronousTestCase()

successResultOf = _CASE.successResultOf
failureResultOf = _CASE.failureResultOf
assertNoResult = _CASE.assertNoResult
