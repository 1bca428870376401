"""A lab certificate authority and broker certificates, generated at lab start (never committed).

PEM files through Python's `cryptography` package: a CA (EC P-256, valid 30 days), and a broker
certificate for 127.0.0.1 / localhost signed by it. Kafka reads the broker's key and chain from one
PEM file (ssl.keystore.type=PEM: the unencrypted PKCS#8 key, then the certificates); clients trust
the CA file (ssl.ca.location). Key files are written with mode 0600.

Kafka 0.9 reads no PEM: make_java_stores puts the same broker key and chain into a PKCS#12 keystore
and the CA into a JKS truststore (keytool). make_client_cert makes the client certificates of a
mutual-TLS lab (0.9's LabSpec.security = "ssl"), whose subjects are the brokers' principals.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from pathlib import Path


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def make_ca(folder: Path, name: str = "fleetlab CA") -> tuple[Path, Path]:
    """(CA certificate, CA key) PEM files in `folder`."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    ca_pem, ca_key = folder / "ca.pem", folder / "ca.key"
    ca_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_private(ca_key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()))
    return ca_pem, ca_key


def make_server_cert(folder: Path, ca_pem: Path, ca_key: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                     name: str = "broker") -> Path:
    """<folder>/<name>.pem: the server's PKCS#8 key, its certificate (subject alternative names:
    `hosts`) and the CA certificate, as Kafka's PEM keystore reads them."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_cert = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    ca_private = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_private, hashes.SHA256()))
    out = folder / f"{name}.pem"
    _write_private(out, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption())
                   + cert.public_bytes(serialization.Encoding.PEM) + ca_pem.read_bytes())
    return out


def make_client_cert(folder: Path, ca_pem: Path, ca_key: Path, subject: dict[str, str], name: str) -> tuple[Path, Path]:
    """(<folder>/<name>.pem, <folder>/<name>.key): a TLS client certificate signed by the lab CA
    (subject: {"CN": ..., "O": ...}; the broker sees its X.500 name) and its PKCS#8 key (0600,
    unencrypted), as librdkafka's ssl.certificate.location / ssl.key.location and Python's ssl read them."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    oids = {"CN": NameOID.COMMON_NAME, "O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME}
    ca_cert = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    ca_private = serialization.load_pem_private_key(ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    # the most significant attribute first in the encoding: RFC 4514 / RFC 2253 strings (Java's
    # X500Principal.getName()) print them in reverse, "CN=fleet,O=fleetlab"
    attrs = [x509.NameAttribute(oids[k], v) for k, v in reversed(list(subject.items()))]
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(x509.Name(attrs))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_private, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = folder / f"{name}.pem", folder / f"{name}.key"
    _write_private(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_file, key_file


def subject_name(cert_file: Path) -> str:
    """The certificate's subject as Kafka names an SSL principal (RFC 2253: "CN=fleet,O=fleetlab")."""
    from cryptography import x509

    return x509.load_pem_x509_certificate(Path(cert_file).read_bytes()).subject.rfc4514_string()


def make_java_stores(folder: Path, server_pem: Path, ca_pem: Path, password: str) -> tuple[Path, Path]:
    """(keystore.p12, truststore.jks) for brokers that cannot read PEM (Kafka before 2.7: 0.9): the
    server's key and chain from `server_pem` in a PKCS#12 keystore (Java 17 reads it as
    ssl.keystore.type=PKCS12), and the CA in a JKS truststore made by `keytool -importcert` (Java
    trusts only certificates a keystore marks as trusted, which keytool does). The password reaches
    keytool through a 0600 file (-storepass:file), never its arguments; both stores are 0600."""
    import shutil
    import subprocess

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = server_pem.read_bytes()
    key = serialization.load_pem_private_key(data, password=None)
    chain = x509.load_pem_x509_certificates(data)
    keystore, truststore = folder / "keystore.p12", folder / "truststore.jks"
    _write_private(keystore, pkcs12.serialize_key_and_certificates(
        b"broker", key, chain[0], chain[1:], serialization.BestAvailableEncryption(password.encode())))
    keytool = shutil.which("keytool")
    if keytool is None:
        raise RuntimeError("keytool is not installed (it comes with the JDK/JRE that runs Kafka)")
    pass_file = folder / f".storepass.{os.getpid()}"
    _write_private(pass_file, password.encode())
    try:
        truststore.unlink(missing_ok=True)
        out = subprocess.run([keytool, "-importcert", "-noprompt", "-alias", "lab-ca", "-file", str(ca_pem),
                              "-keystore", str(truststore), "-storetype", "JKS", "-storepass:file", str(pass_file)],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"keytool -importcert into {truststore} failed: {(out.stdout + out.stderr).strip()[-500:]}")
        os.chmod(truststore, 0o600)
    finally:
        pass_file.unlink(missing_ok=True)
    return keystore, truststore
