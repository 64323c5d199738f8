"""Federation policies (``federation-policy`` directive): who a node asks
for jobs, when, and what it gives (``IFederationPolicy`` providers).

The factory of the built-in ``default`` policy lives here, in a module
that imports nothing heavy, because the dropin lists it; ``make`` imports
the policy module (``disque.federation.default``) when the node is built.
"""

from zope.interface import implementer

from ..interfaces import IFederationPolicyFactory
from ..plugins import StrategyError, integer, parse_args

_MS = integer(1, 3_600_000)
_JOBS = integer(1, 1_000_000)


@implementer(IFederationPolicyFactory)
class DefaultPolicyFactory:
    """``default``: the original's NEEDJOBS/YOURJOBS algorithm.  Its
    arguments change the limits the original hard-codes: how many jobs a
    request asks of each source (``min-request``..``max-request``), and the
    longest back-off between discovery broadcasts (``bcast-max-delay``) and
    between requests to known sources (``adhoc-max-delay``)."""

    name = "default"
    description = "The original's NEEDJOBS/YOURJOBS algorithm."
    argStringFormat = ("min-request=<jobs> (5), max-request=<jobs> (100), bcast-max-delay=<ms> (30000), "
                       "adhoc-max-delay=<ms> (2000)")

    def make(self, argstring, config):
        options = parse_args(argstring, {"min-request": _JOBS, "max-request": _JOBS,
                                         "bcast-max-delay": _MS, "adhoc-max-delay": _MS})
        from .default import DefaultPolicy

        try:
            return DefaultPolicy(**options)
        except ValueError as e:
            raise StrategyError(str(e)) from None


default_policy = DefaultPolicyFactory()
