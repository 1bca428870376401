"""Every request and response the toolkit speaks (fleetkit.clients.protocol.messages) is declared
as Kafka declares it: for each version spoken, the same fields in the same order, with the same
names, types, nullability and defaults as the message specs inside Kafka's own kafka-clients jar
(common/message/*.json; tagged fields aside, none is sent). The jars are the lab's Kafka 4.3 and
3.9 (fleetlab.dists); a version 4.3 no longer lists (Fetch v0-v3, for Kafka 0.9) is checked
against 3.9's spec, which still does."""

from __future__ import annotations

import json
import re
import zipfile
from functools import lru_cache

import pytest

from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol.schema import NULL, Field, versions

KAFKA = ("4.3.1", "3.9.2")  # the lab's generations with kafka-clients jars, newest first


@lru_cache(maxsize=None)
def _jar(version: str) -> zipfile.ZipFile:
    from fleetlab import dists

    jar = dists.ensure(version) / "libs" / f"kafka-clients-{version}.jar"
    return zipfile.ZipFile(jar)


def spec(name: str, version: int) -> dict:
    """The newest of the lab's specs of message `name` that lists `version`."""
    for kafka in KAFKA:
        try:
            text = _jar(kafka).read(f"common/message/{name}.json").decode()
        except KeyError:
            continue
        doc = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))
        lo, hi = versions(doc["validVersions"])
        if lo <= version <= hi:
            return doc
    raise AssertionError(f"no spec of {name} in Kafka {', '.join(KAFKA)} lists version {version}")


def _in(spec_versions: str, v: int) -> bool:
    lo, hi = versions(spec_versions)
    return lo <= v <= hi


def _default(value: str, type_: str):
    if value == "null":
        return NULL
    if type_ in ("int8", "int16", "uint16", "int32", "int64"):
        return int(value, 0) if isinstance(value, str) else int(value)
    if type_ == "bool":
        return str(value).lower() == "true"
    return value


def from_spec(fields: list[dict], v: int, common: dict[str, list[dict]]) -> list[tuple]:
    out = []
    for f in fields:
        if "taggedVersions" in f or not _in(f["versions"], v):
            continue
        struct = f["type"].removeprefix("[]")
        sub = f.get("fields") or common.get(struct)
        out.append((f["name"], f["type"], _in(f.get("nullableVersions", "none"), v),
                    _default(f["default"], f["type"]) if "default" in f else None,
                    from_spec(sub, v, common) if sub else None))
    return out


def declared(fields: tuple[Field, ...], v: int) -> list[tuple]:
    return [(f.name, f.type, f.null_in(v), f.default, declared(f.fields, v) if f.fields else None)
            for f in fields if f.present(v)]


CASES = [(api, kind, v) for api in m.APIS.values() for kind in ("Request", "Response")
         for v in range(api.versions[0], api.versions[1] + 1)]


@pytest.mark.parametrize("api, kind, v", CASES, ids=[f"{a.name}{k}-v{v}" for a, k, v in CASES])
def test_declaration_matches_kafkas_spec(api, kind, v):
    doc = spec(api.name + kind, v)
    assert doc["apiKey"] == api.key
    flexible = doc.get("flexibleVersions", "none")
    assert api.flexible_from == (None if flexible == "none" else versions(flexible)[0])
    common = {c["name"]: c["fields"] for c in doc.get("commonStructs", [])}
    fields = api.request if kind == "Request" else api.response
    assert declared(fields, v) == from_spec(doc["fields"], v, common)


def test_consumer_protocol_assignment_matches_kafkas_spec():
    doc = spec("ConsumerProtocolAssignment", 0)
    assert declared(m.CONSUMER_PROTOCOL_ASSIGNMENT, 0) == from_spec(doc["fields"], 0, {})


def test_a_wrong_declaration_is_seen():
    """The comparison can fail: a field of the wrong type, or one left out, differs from the spec."""
    doc = spec("FindCoordinatorResponse", 4)
    good = declared(m.FIND_COORDINATOR.response, 4)
    assert good == from_spec(doc["fields"], 4, {})
    wrong_type = tuple(Field(f.name, "int16" if f.name == "ThrottleTimeMs" else f.type, f.versions, f.nullable,
                             f.default, f.fields) for f in m.FIND_COORDINATOR.response)
    assert declared(wrong_type, 4) != from_spec(doc["fields"], 4, {})
    assert declared(m.FIND_COORDINATOR.response[1:], 4) != from_spec(doc["fields"], 4, {})
