"""Dropin: makes ``federation-policy eager`` available to ``twistd disque``.

The whole of a third-party strategy's registration: one factory class,
stating its name, description and argument format once.  Cheap to import
(every ``twistd`` run imports every dropin): the policy module loads in
``make``, when a node is built with it.
"""

from zope.interface import implementer

from disque.interfaces import IFederationPolicyFactory
from disque.plugins import integer, parse_args


@implementer(IFederationPolicyFactory)
class EagerPolicyFactory:
    name = "eager"
    description = "Ask every peer at a fixed pace; give at most half a queue."
    argStringFormat = "interval=<ms> (default 100)"

    def make(self, argstring, config):
        options = parse_args(argstring, {"interval": integer(1, 60_000)})
        from eager_federation import EagerPolicy

        return EagerPolicy(**options)


eager = EagerPolicyFactory()
