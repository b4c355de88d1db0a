"""Throwaway PKI for the TLS tests: a CA, a server certificate for 127.0.0.1/localhost, client certificates
(`issue_client` makes more, for any subject CN and subjectAltName entries).

Made with `cryptography` (a dev dependency) in a temp folder; EC P-256 keys keep it fast (~ms).
Import explicitly: `from tls_fixtures import pki`.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path            # CA certificate that signed server and client
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path      # an unrelated CA (a client trusting it must fail the handshake)
    ca_key: Path        # the CA's key, for `issue_client`


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))


def _ca(cn: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn)).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(ca_key, ca_cert, cn: str, server: bool, alt_names: Sequence[x509.GeneralName] = ()
          ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = _name(cn) if cn else x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fedort tests")])
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                     else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    elif alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(alt_names)), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def make_pki(folder: Path) -> Pki:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = _ca("fedort test CA")
    s_key, s_cert = _leaf(ca_key, ca_cert, "127.0.0.1", server=True)
    c_key, c_cert = _leaf(ca_key, ca_cert, "client-0001", server=False)
    _, other = _ca("some other CA")
    pem = serialization.Encoding.PEM
    paths = Pki(folder / "ca.pem", folder / "server.pem", folder / "server.key", folder / "client.pem",
                folder / "client.key", folder / "other-ca.pem", folder / "ca.key")
    paths.ca.write_bytes(ca_cert.public_bytes(pem))
    paths.server_cert.write_bytes(s_cert.public_bytes(pem))
    _write_key(s_key, paths.server_key)
    paths.client_cert.write_bytes(c_cert.public_bytes(pem))
    _write_key(c_key, paths.client_key)
    paths.other_ca.write_bytes(other.public_bytes(pem))
    _write_key(ca_key, paths.ca_key)
    return paths


def issue_client(pki: Pki, folder: Path, cn: str, alt_names: Sequence[x509.GeneralName] = ()) -> tuple[Path, Path]:
    """(certificate, key) files of a client certificate signed by `pki`'s CA: subject CN `cn` (none when
    empty), with `alt_names` as its subjectAltName entries."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key, cert = _leaf(ca_key, ca_cert, cn, server=False, alt_names=alt_names)
    stem = cn or "no-cn"
    cert_file, key_file = folder / f"{stem}.pem", folder / f"{stem}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, key_file)
    return cert_file, key_file


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    """CA, server cert (SAN 127.0.0.1, localhost) and a client cert, in a session temp folder."""
    return make_pki(tmp_path_factory.mktemp("pki"))
