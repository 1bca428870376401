"""The lab's OAuth 2 issuer: signed JWTs for SASL/OAUTHBEARER on the secured labs.

A secured lab (LabSpec.security = "sasl_ssl") accepts OAUTHBEARER next to SCRAM on its SASL_SSL
listener, validated as production brokers validate their identity provider's tokens: Kafka's
OAuthBearerValidatorCallbackHandler checks the signature against a JSON Web Key Set, the issuer,
the audience and the expiry; the principal is the token's `sub` claim (so the ACLs of `fleet`
apply to a token whose subject is `fleet`). There is no identity provider to run here, so the lab
is its own issuer: an RSA key generated at first start (<lab>/tls/oauth-issuer.key, 0600) signs the
tokens, and the brokers read its public half from <lab>/tls/jwks.json (a file: URL, allowed by
the brokers' org.apache.kafka.sasl.oauthbearer.allowed.urls system property).

Clients get tokens from `token`, an `oauth_cb` for confluent-kafka that the apache-kafka provider
resolves from a connection's extra (`"oauth_cb": "fleetlab.oauth.token"`, listed in airflow.cfg's
[apache_kafka] callback_allowlist), configured by the connection's `sasl.oauthbearer.config`:
"principal=fleet issuer_key=<lab>/tls/oauth-issuer.key". A production deployment names its own
callback (its identity provider's client, or the provider's managed OAuth) the same way.

JWTs are signed by PyJWT (RS256) with keys from `cryptography`; nothing is hand-written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from fleetlab.tls import _write_private

ISSUER = "fleetlab"
AUDIENCE = "kafka"
KEY_ID = "fleetlab-1"
LIFETIME = 3600  # seconds


def issuer_key(tls_dir: Path) -> Path:
    return Path(tls_dir) / "oauth-issuer.key"


def jwks_file(tls_dir: Path) -> Path:
    return Path(tls_dir) / "jwks.json"


def ensure_issuer(tls_dir: Path) -> tuple[Path, Path]:
    """(signing key, JWKS) of the lab's issuer, generated once: an RSA-2048 key (PKCS#8 PEM, 0600)
    and the JSON Web Key Set of its public half, which the brokers read."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    key_file, jwks = issuer_key(tls_dir), jwks_file(tls_dir)
    if key_file.exists() and jwks.exists():
        return key_file, jwks
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_private(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
    public = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    public.update({"kid": KEY_ID, "use": "sig", "alg": "RS256"})
    jwks.write_text(json.dumps({"keys": [public]}))
    return key_file, jwks


def sign(principal: str, key_file: Path, lifetime: int = LIFETIME, now: float | None = None) -> tuple[str, float]:
    """(JWT, expiry in epoch seconds) for `principal`, signed with the key in `key_file`."""
    import jwt

    now = time.time() if now is None else now
    expiry = int(now) + lifetime
    claims = {"sub": principal, "iss": ISSUER, "aud": AUDIENCE, "iat": int(now), "exp": expiry,
              "scope": "kafka"}
    token = jwt.encode(claims, Path(key_file).read_bytes(), algorithm="RS256", headers={"kid": KEY_ID})
    return token, float(expiry)


def parse_config(config: str) -> dict[str, str]:
    """`sasl.oauthbearer.config` ("principal=fleet issuer_key=/path") as a dict; an entry without
    '=' is an error naming the setting (never its whole value: it could hold a secret)."""
    out = {}
    for part in (config or "").split():
        name, sep, value = part.partition("=")
        if not sep or not name:
            raise ValueError(f"sasl.oauthbearer.config: expected name=value entries, got an entry named {name!r}")
        out[name] = value
    return out


def token(config: str) -> tuple[str, float]:
    """confluent-kafka's oauth_cb: a token for the configured principal, signed by the lab's issuer."""
    opts = parse_config(config)
    missing = [k for k in ("principal", "issuer_key") if not opts.get(k)]
    if missing:
        raise ValueError(f"sasl.oauthbearer.config lacks {', '.join(missing)} (fleetlab.oauth.token)")
    return sign(opts["principal"], Path(opts["issuer_key"]))
