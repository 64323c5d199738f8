"""Federation policies: who a node asks for jobs, when, and what it gives
(``IFederationPolicy`` providers, chosen by name with ``federation-policy``)."""
