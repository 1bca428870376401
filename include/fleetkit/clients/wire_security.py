"""TLS and SASL for the toolkit's own protocol client (fleetkit.clients.wire and the modules on it).

The settings are the connection's librdkafka ones, so one Airflow connection serves confluent-kafka
and the wire client alike:

    security.protocol                    PLAINTEXT (default), SSL, SASL_PLAINTEXT, SASL_SSL
    sasl.mechanism                       PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI, OAUTHBEARER: the
                                         wire client is not used, `supported` says False)
    sasl.username / sasl.password
    ssl.ca.location                      PEM file of the CAs to trust (default: the system's)
    ssl.certificate.location             client certificate (mutual TLS) ...
    ssl.key.location / ssl.key.password  ... and its key
    ssl.endpoint.identification.algorithm  "https" (default): the broker's certificate must name the
                                         host connected to; "none" or "": it need not
    enable.ssl.certificate.verification  false: no certificate check at all (lab use only)

TLS is Python's `ssl`; SCRAM is `scramp`. The login follows Kafka's SASL exchange (KIP-43,
KIP-152): after ApiVersions, SaslHandshake v1 (API key 17) names the mechanism, then the
mechanism's messages travel in SaslAuthenticate v0-v1 requests (API key 36), each answered with
an error code, an error message and the server's bytes. Schemas: Kafka's
clients/src/main/resources/common/message/SaslHandshake*.json and SaslAuthenticate*.json.

A failed login raises AuthenticationFailed ("authentication failed for <user> on <cluster>: <the
broker's message>") and a failed TLS handshake TlsHandshakeFailed (naming the broker and the
reason): neither is an OSError, so the callers that move on to the next bootstrap server on a
connection error do not retry them. The password is never part of a message, a log line or a repr.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol.schema import error_name
from fleetkit.core.errors import AuthenticationFailed, FleetConfigError, TlsHandshakeFailed

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _flag(value, default: bool) -> bool:
    if value is None:
        return default
    return str(value).strip().lower() not in ("false", "0", "no")


@dataclass(frozen=True)
class Security:
    """How to open and log in a connection to a broker."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None
    key_password: str | None = field(default=None, repr=False)
    check_hostname: bool = True
    verify_certificates: bool = True
    #: what messages call the cluster (its fleet name); the broker address when None
    cluster: str | None = None

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def principal(self) -> str:
        """The principal the brokers see (SASL user; TLS client certificates and anonymous
        connections: as Kafka names them by default)."""
        if self.sasl:
            return f"User:{self.username}"
        if self.tls and self.certificate_location:
            return certificate_principal(self.certificate_location)
        return "User:ANONYMOUS"

    @classmethod
    def from_config(cls, config: dict, cluster: str | None = None) -> "Security":
        """The settings of a librdkafka config dict; FleetConfigError naming the key that is
        missing or wrong."""
        where = f"cluster {cluster!r}" if cluster else "the Kafka connection"
        protocol = str(config.get("security.protocol") or "PLAINTEXT").strip().upper()
        if protocol not in PROTOCOLS:
            raise FleetConfigError(f"{where}: security.protocol {config.get('security.protocol')!r} is not one of "
                                   f"{', '.join(PROTOCOLS)}")
        mechanism = username = password = None
        if protocol.startswith("SASL_"):
            # librdkafka's default mechanism is GSSAPI
            mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI").strip().upper()
            if mechanism not in MECHANISMS:
                raise FleetConfigError(f"{where}: sasl.mechanism {mechanism!r} is not spoken by the toolkit's protocol "
                                       f"client (it speaks {', '.join(MECHANISMS)})")
            username = config.get("sasl.username")
            password = config.get("sasl.password")
            if not username:
                raise FleetConfigError(f"{where}: security.protocol {protocol} needs sasl.username")
            if password is None:
                raise FleetConfigError(f"{where}: security.protocol {protocol} needs sasl.password")
        algorithm = config.get("ssl.endpoint.identification.algorithm", "https")
        return cls(protocol=protocol, mechanism=mechanism, username=str(username) if username else None,
                   password=None if password is None else str(password),
                   ca_location=config.get("ssl.ca.location") or None,
                   certificate_location=config.get("ssl.certificate.location") or None,
                   key_location=config.get("ssl.key.location") or None,
                   key_password=config.get("ssl.key.password") or None,
                   check_hostname=str(algorithm or "").strip().lower() not in ("", "none"),
                   verify_certificates=_flag(config.get("enable.ssl.certificate.verification"), True),
                   cluster=cluster)

    def ssl_context(self) -> ssl.SSLContext:
        where = f"cluster {self.cluster!r}" if self.cluster else "the Kafka connection"
        try:
            ctx = ssl.create_default_context(cafile=self.ca_location)
        except (OSError, ssl.SSLError) as e:
            raise FleetConfigError(f"{where}: ssl.ca.location {self.ca_location!r} is not readable as PEM CAs: "
                                   f"{e}") from None
        if self.certificate_location:
            try:
                ctx.load_cert_chain(self.certificate_location, self.key_location, password=self.key_password)
            except (OSError, ssl.SSLError) as e:
                raise FleetConfigError(f"{where}: ssl.certificate.location {self.certificate_location!r} / "
                                       f"ssl.key.location {self.key_location!r} not usable: "
                                       f"{getattr(e, 'strerror', None) or type(e).__name__}") from None
        ctx.check_hostname = self.check_hostname and self.verify_certificates
        if not self.verify_certificates:
            ctx.verify_mode = ssl.CERT_NONE
        return ctx


def certificate_principal(certificate_location: str) -> str:
    """The principal a broker gives a TLS client certificate by default: "User:" + the certificate's
    X.500 subject in RFC 2253 form ("User:CN=fleet,O=fleetlab"; Kafka 0.9's DefaultPrincipalBuilder,
    and later brokers without ssl.principal.mapping.rules). "the client certificate of <file>" when
    the file cannot be read."""
    try:
        from cryptography import x509

        with open(certificate_location, "rb") as f:
            return "User:" + x509.load_pem_x509_certificate(f.read()).subject.rfc4514_string()
    except Exception:  # noqa: BLE001 - only a name for messages
        return f"the client certificate of {certificate_location}"


def supported(config: dict) -> bool:
    """True when the wire client can speak to the cluster of this config: PLAINTEXT, SSL, or SASL
    with a mechanism it speaks (a config error is raised later, when connecting, naming the key)."""
    protocol = str(config.get("security.protocol") or "PLAINTEXT").strip().upper()
    if protocol in ("PLAINTEXT", "SSL"):
        return True
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "GSSAPI").strip().upper()
        return mechanism in MECHANISMS
    return False


def wrap(sock, host: str, port: int, security: Security):
    """The TLS socket over `sock` after a completed handshake; TlsHandshakeFailed naming the broker
    and the reason."""
    ctx = security.ssl_context()
    try:
        return ctx.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as e:
        sock.close()
        raise TlsHandshakeFailed(f"TLS handshake with broker {host}:{port}{_on(security)} failed: certificate "
                                 f"verify failed: {e.verify_message or e.reason}") from None
    except ssl.SSLError as e:
        sock.close()
        raise TlsHandshakeFailed(f"TLS handshake with broker {host}:{port}{_on(security)} failed: "
                                 f"{e.reason or e}") from None


def _on(security: Security) -> str:
    return f" of cluster {security.cluster!r}" if security.cluster else ""


# -- SASL -------------------------------------------------------------------------------------
def login(broker, security: Security) -> None:
    """Log the broker connection (fleetkit.clients.protocol.transport.Broker, after ApiVersions) in:
    SaslHandshake v1 then the mechanism's SaslAuthenticate round trips. AuthenticationFailed on any
    refusal."""
    addr = f"{broker.host}:{broker.port}"
    on = security.cluster or addr

    def failed(reason: str) -> AuthenticationFailed:
        return AuthenticationFailed(f"authentication failed for {security.username} on {on}: {reason}")

    versions = broker.versions
    if not versions or m.SASL_AUTHENTICATE.key not in versions or m.SASL_HANDSHAKE.key not in versions:
        raise failed(f"broker {addr} does not speak SaslAuthenticate (Kafka 1.0 and later do)")
    if m.SASL_HANDSHAKE.pick_version(versions) is None:
        raise failed(f"broker {addr} does not speak SaslHandshake v1")
    version = m.SASL_AUTHENTICATE.pick_version(versions)
    if version is None:
        auth_lo, auth_hi = versions[m.SASL_AUTHENTICATE.key]
        raise failed(f"broker {addr} accepts SaslAuthenticate v{auth_lo}-v{auth_hi} only")
    answer = broker.call(m.SASL_HANDSHAKE, 1, {"Mechanism": security.mechanism})
    if answer["ErrorCode"]:
        raise failed(f"{error_name(answer['ErrorCode'])} (the broker enables "
                     f"{', '.join(answer['Mechanisms']) or 'no mechanism'} on this listener, the connection asks "
                     f"for {security.mechanism})")

    def exchange(token: bytes) -> bytes:
        reply = broker.call(m.SASL_AUTHENTICATE, version, {"AuthBytes": token})
        if reply["ErrorCode"]:
            raise failed(reply["ErrorMessage"] or error_name(reply["ErrorCode"]))
        return reply["AuthBytes"] or b""

    if security.mechanism == "PLAIN":
        exchange(b"\x00" + security.username.encode() + b"\x00" + (security.password or "").encode())
        return
    import scramp

    client = scramp.ScramClient([security.mechanism], security.username, security.password or "")
    server_first = exchange(client.get_client_first().encode())
    try:
        client.set_server_first(server_first.decode("utf-8", "replace"))
        server_final = exchange(client.get_client_final().encode())
        client.set_server_final(server_final.decode("utf-8", "replace"))
    except scramp.ScramException as e:
        raise failed(f"the SCRAM exchange with broker {addr} failed ({e})") from None
