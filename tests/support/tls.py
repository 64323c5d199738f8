"""Throwaway certificates for the TLS tests, and a TLS RESP client.

:func:`make_pki` writes, in one directory, a CA and certificates it signs
(EC P-256 keys: fast to make), plus a second CA that signs an *intruder*
certificate: a well-formed certificate the node must refuse.  Every
certificate carries ``IP:127.0.0.1`` and ``DNS:localhost`` and may serve as
client and as server (node certificates are both on the bus).  Made with
the ``cryptography`` package, which pyOpenSSL (the node's TLS) depends on.
"""

import datetime
import os
import ssl
import ipaddress
from collections import namedtuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.process import Client

#: Paths of the files make_pki writes (each a str); ``*_key`` the keys.
PKI = namedtuple("PKI", "dir ca ca_key node node_key node2 node2_key client client_key "
                        "other_ca intruder intruder_key tenant tenant_key")


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key, path):
    with open(path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                  serialization.NoEncryption()))


def _write_cert(cert, path):
    with open(path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))


def _ca(cn):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(cn, ca_cert, ca_key):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return cert, key


def make_pki(directory) -> PKI:
    """Write the CA, two node certificates, a client certificate, a
    tenant's client certificate (CN ``tenant-a``, a user name) and an
    intruder (signed by another CA) into ``directory``."""
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    paths = {"dir": directory}

    def save(stem, cert, key):
        paths[stem] = os.path.join(directory, stem + ".crt")
        _write_cert(cert, paths[stem])
        if key is not None:
            paths[stem + "_key"] = os.path.join(directory, stem + ".key")
            _write_key(key, paths[stem + "_key"])

    ca_cert, ca_key = _ca("disque test CA")
    save("ca", ca_cert, ca_key)
    for stem in ("node", "node2", "client"):
        save(stem, *_leaf("disque " + stem, ca_cert, ca_key))
    save("tenant", *_leaf("tenant-a", ca_cert, ca_key))  # a client whose CN names a user
    other_cert, other_key = _ca("another CA")
    save("other_ca", other_cert, None)
    save("intruder", *_leaf("intruder", other_cert, other_key))
    return PKI(**paths)


def node_directives(pki, **more) -> dict:
    """The tls-* directives of a node using ``pki``'s node certificate."""
    return {"tls-cert-file": pki.node, "tls-key-file": pki.node_key, "tls-ca-cert-file": pki.ca, **more}


def client_context(ca=None, cert=None, key=None) -> ssl.SSLContext:
    """A client context that trusts ``ca`` (no name check: tests reach
    127.0.0.1) and presents ``cert``/``key`` if given."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    if ca:
        ctx.load_verify_locations(ca)
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


class TLSClient(Client):
    """support.Client over TLS (the handshake is done when it returns)."""

    def __init__(self, port, context, host="127.0.0.1", timeout=10.0):
        super().__init__(port, host, timeout)
        self.sock = context.wrap_socket(self.sock, server_hostname=None)


def handshake(server_context, cert=None, key=None, ca=None, protocol=None, ciphers=None, ciphersuites=None):
    """A TLS handshake in memory between a node's OpenSSL context (the
    server) and a pyOpenSSL client presenting ``cert``/``key``, trusting
    ``ca``, limited to ``protocol`` (an OpenSSL.SSL.TLS1_*_VERSION) and
    ``ciphers``/``ciphersuites``.  None if both ends complete it, else
    which end refused ("client" or "server") and OpenSSL's words."""
    from OpenSSL import SSL

    ctx = SSL.Context(SSL.TLS_METHOD)
    if ca:
        ctx.load_verify_locations(ca.encode())
        ctx.set_verify(SSL.VERIFY_PEER, lambda conn, x509, errno, depth, ok: bool(ok))
    if cert:
        ctx.use_certificate_file(cert.encode())
        ctx.use_privatekey_file(key.encode())
    if protocol:
        ctx.set_min_proto_version(protocol)
        ctx.set_max_proto_version(protocol)
    if ciphers:
        ctx.set_cipher_list(ciphers.encode())
    if ciphersuites:
        ctx.set_tls13_ciphersuites(ciphersuites.encode())
    server, client = SSL.Connection(server_context, None), SSL.Connection(ctx, None)
    server.set_accept_state()
    client.set_connect_state()
    done = set()
    for _ in range(10):
        for name, me, peer in (("client", client, server), ("server", server, client)):
            if name not in done:
                try:
                    me.do_handshake()
                    done.add(name)
                except SSL.WantReadError:
                    pass
                except SSL.Error as e:
                    return name, str(e)
            try:
                peer.bio_write(me.bio_read(65536))
            except SSL.WantReadError:
                pass
        if len(done) == 2:
            break
    # TLS 1.3: the server judges the client's certificate after the client
    # is done; its verdict (an alert) reaches the client on its first read.
    try:
        client.recv(1)
    except SSL.WantReadError:
        return None if len(done) == 2 else ("both", "unfinished")
    except SSL.Error as e:
        return "client", str(e)
    return None
