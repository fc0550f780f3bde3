"""TLS for an application's channels: the umbilical (gRPC) and the buffer servers.

With ``TLS`` on (the DAG attribute; on YARN by default), the master makes the
application's own identity once, an EC P-256 key and a self-signed
certificate for the name :data:`SERVER_NAME`, and keeps both under
``APP_PATH/tls`` (owner-only, like every file there; a new master attempt
reuses them). Every client trusts exactly that certificate (it is its own
root), so nothing else can pose as the master or a buffer server, whatever
host it runs on; the host name is not what is checked, the application is.

Containers learn that TLS is on from the certificate's presence next to
``heartbeatUri`` (the master writes it first), read the key there for their
buffer servers, and present their credentials (:mod:`stram.common.secret`) only
inside the encrypted channel.
"""

from __future__ import annotations

import datetime
import ssl
from dataclasses import dataclass

from stram.common import fs

__all__ = ["SERVER_NAME", "Identity", "make_identity", "load_identity", "load_or_make_identity",
           "load_certificate", "server_context", "client_context", "grpc_server_credentials",
           "grpc_channel_credentials", "GRPC_CHANNEL_OPTIONS", "key_uri", "cert_uri"]

#: The name in the application's certificate; clients check it instead of a host name.
SERVER_NAME = "stram-application"
#: gRPC channel options a TLS client needs (the name it checks).
GRPC_CHANNEL_OPTIONS = (("grpc.ssl_target_name_override", SERVER_NAME),)


@dataclass(frozen=True)
class Identity:
    """The application's key and certificate, PEM."""

    key_pem: bytes
    cert_pem: bytes


def key_uri(app_path: str) -> str:
    """Where the application's private key lives."""
    return fs.join(app_path, "tls", "key.pem")


def cert_uri(app_path: str) -> str:
    """Where the application's certificate lives (its presence means TLS is on)."""
    return fs.join(app_path, "tls", "cert.pem")


def make_identity(app_id: str, days: int = 3650) -> Identity:
    """A new EC P-256 key and a self-signed certificate for :data:`SERVER_NAME`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, SERVER_NAME),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, f"stram {app_id}"[:64])])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(SERVER_NAME)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return Identity(key_pem, cert.public_bytes(serialization.Encoding.PEM))


def load_identity(app_path: str) -> Identity:
    """The identity :func:`load_or_make_identity` kept under ``app_path`` (OSError: none)."""
    return Identity(fs.read_bytes(key_uri(app_path)), fs.read_bytes(cert_uri(app_path)))


def load_certificate(app_path: str) -> bytes | None:
    """The application's certificate, or None when TLS is off (no certificate)."""
    try:
        return fs.read_bytes(cert_uri(app_path))
    except FileNotFoundError:
        return None


def load_or_make_identity(app_path: str, app_id: str) -> Identity:
    """The application's identity: the one an earlier master attempt kept, else a new one, kept.

    The key is written before the certificate, so a certificate (which tells
    containers that TLS is on) always has its key next to it.
    """
    try:
        return load_identity(app_path)
    except FileNotFoundError:
        pass
    identity = make_identity(app_id)
    fs.write_atomic(key_uri(app_path), identity.key_pem)
    fs.write_atomic(cert_uri(app_path), identity.cert_pem)
    return identity


def server_context(identity: Identity) -> ssl.SSLContext:
    """A TLS 1.2+ server context presenting ``identity`` (the buffer servers')."""
    import os
    import tempfile

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # the ssl module loads a key from a file only: a private temporary one, removed at once
    fd, path = tempfile.mkstemp(prefix="stram-tls-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(identity.key_pem + identity.cert_pem)
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)
    return ctx


def client_context(cert_pem: bytes) -> ssl.SSLContext:
    """A TLS client context that trusts the application's certificate and nothing else."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(cadata=cert_pem.decode())
    ctx.check_hostname = True
    return ctx


def grpc_server_credentials(identity: Identity):
    """gRPC server credentials presenting ``identity`` (the umbilical's)."""
    import grpc

    return grpc.ssl_server_credentials([(identity.key_pem, identity.cert_pem)])


def grpc_channel_credentials(cert_pem: bytes):
    """gRPC channel credentials that trust the application's certificate (use with
    :data:`GRPC_CHANNEL_OPTIONS`)."""
    import grpc

    return grpc.ssl_channel_credentials(root_certificates=cert_pem)
