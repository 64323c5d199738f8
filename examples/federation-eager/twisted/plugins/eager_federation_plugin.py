"""Dropin: makes ``federation-policy eager`` available to ``twistd disque``.
Cheap to import: the policy module loads on first use."""

from disque.interfaces import IFederationPolicyFactory
from disque.plugins import LazyStrategy

eager = LazyStrategy(
    IFederationPolicyFactory, "eager", "Ask every peer at a fixed pace; give at most half a queue.",
    "interval=<ms> (default 100)", "eager_federation:factory",
)
