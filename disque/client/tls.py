"""TLS for the clients: one set of options, for Twisted and for sockets.

``TLSOptions(ca_cert_file=..., cert_file=..., key_file=...)`` is what a node
with ``tls-port`` needs from a client (docs/security.md): the CA that signed
the nodes' certificates, and a client certificate when the node has
``tls-auth-clients yes``.  The server certificate is checked against the
address the client connects to (or ``server_name``), as ``redis-cli --tls``
does.
"""

import ssl
from typing import Optional


class TLSOptions:
    def __init__(self, ca_cert_file: Optional[str] = None, cert_file: Optional[str] = None,
                 key_file: Optional[str] = None, server_name: Optional[str] = None):
        if (cert_file is None) != (key_file is None):
            raise ValueError("cert_file and key_file go together")
        self.ca_cert_file = ca_cert_file
        self.cert_file = cert_file
        self.key_file = key_file
        self.server_name = server_name

    def creator(self, host: str):
        """Twisted's connection creator for a node at ``host``."""
        from twisted.internet import ssl as tssl

        trust = None
        if self.ca_cert_file:
            with open(self.ca_cert_file, "rb") as f:
                trust = tssl.Certificate.loadPEM(f.read())
        client_cert = None
        if self.cert_file:
            with open(self.cert_file, "rb") as f:
                cert = f.read()
            with open(self.key_file, "rb") as f:
                key = f.read()
            client_cert = tssl.PrivateCertificate.loadPEM(cert + b"\n" + key)
        return tssl.optionsForClientTLS(self.server_name or host, trustRoot=trust,
                                        clientCertificate=client_cert)

    def context(self) -> ssl.SSLContext:
        """The standard library's context (the blocking client)."""
        ctx = ssl.create_default_context(cafile=self.ca_cert_file)
        if self.cert_file:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        return ctx
