"""The lab's OAuth issuer (fleetlab.oauth) and the principal an OAUTHBEARER connection is named by."""

from __future__ import annotations

import json
import stat

import jwt
import pytest
from jwt.algorithms import RSAAlgorithm

from fleetkit.clients.kafka import KafkaCluster
from fleetlab import oauth


def test_tokens_verify_against_the_published_key_set_only(tmp_path):
    key, jwks = oauth.ensure_issuer(tmp_path / "tls")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert oauth.ensure_issuer(tmp_path / "tls") == (key, jwks)  # generated once
    token, expiry = oauth.token(f"principal=fleet issuer_key={key}")
    public = RSAAlgorithm.from_jwk(json.dumps(json.loads(jwks.read_text())["keys"][0]))
    claims = jwt.decode(token, public, algorithms=["RS256"], audience=oauth.AUDIENCE, issuer=oauth.ISSUER)
    assert claims["sub"] == "fleet" and claims["exp"] == int(expiry)
    other, _ = oauth.ensure_issuer(tmp_path / "other")
    forged, _ = oauth.sign("fleet", other)
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(forged, public, algorithms=["RS256"], audience=oauth.AUDIENCE)


def test_a_bad_config_names_the_setting_not_its_value():
    with pytest.raises(ValueError, match="lacks issuer_key") as e:
        oauth.token("principal=fleet")
    with pytest.raises(ValueError, match=r"entry named 's3cr3t-token'") as e:
        oauth.parse_config("principal=fleet s3cr3t-token")
    assert "principal=fleet" not in str(e.value)


@pytest.mark.parametrize("config, principal", [
    ({"sasl.oauthbearer.config": "principal=fleet issuer_key=/k"}, "User:fleet"),
    ({"sasl.oauthbearer.config": "scope=kafka"}, "the subject of the OAUTHBEARER token"),
    ({}, "the subject of the OAUTHBEARER token"),
])
def test_an_oauthbearer_connection_names_its_principal(config, principal):
    kafka = KafkaCluster("prod", {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_SSL",
                                  "sasl.mechanism": "OAUTHBEARER", **config})
    try:
        assert kafka.principal == principal
    finally:
        kafka.close()
