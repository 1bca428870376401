"""The Permissions section of docs/security.md is the contract: the `kafka-acls` commands an operator pastes
grant exactly what the lab's secured clusters grant (fleetlab.lab.SECURED_ACLS), and the secured
tests run with those ACLs and nothing more."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from fleetlab.lab_security import SECURED_ACLS, SSL_ACLS

SECURITY = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def snake(operation: str) -> str:
    """kafka-acls' operation names (DescribeConfigs) as AdminClient's (DESCRIBE_CONFIGS)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).upper()


def readme_acls(text: str) -> set[tuple[str, str, str, str]]:
    section = text.split("\n## Permissions", 1)[1].split("\n## ", 1)[0]
    out: set[tuple[str, str, str, str]] = set()
    for line in section.splitlines():
        if not line.startswith("kafka-acls"):
            continue
        args = shlex.split(line)
        principal = args[args.index("--allow-principal") + 1].removeprefix("User:")
        ops = [snake(args[i + 1]) for i, a in enumerate(args) if a == "--operation"]
        if "--cluster" in args:
            resource = ("cluster", "kafka-cluster")
        else:
            kind = next(a for a in ("--group", "--topic") if a in args)
            resource = (kind.removeprefix("--"), args[args.index(kind) + 1])
        assert ops, f"no --operation in {line!r}"
        out |= {(principal, *resource, op) for op in ops}
    return out


def test_the_docs_grant_exactly_the_lab_acls():
    documented = readme_acls(SECURITY.read_text())
    granted = {(user, kind, name, op) for user, acls in SECURED_ACLS.items() for kind, name, op in acls}
    assert documented, "docs/security.md's Permissions section lists no kafka-acls command"
    assert documented - granted == set(), "docs/security.md lists ACLs the lab does not grant"
    assert granted - documented == set(), "the lab grants ACLs docs/security.md does not list"


def test_the_parser_sees_a_difference():
    """The comparison above can fail: one operation dropped from a command is noticed."""
    text = SECURITY.read_text()
    line = next(x for x in text.splitlines() if x.startswith("kafka-acls") and "User:fleet " in x
                and "--operation Read --topic __consumer_offsets" in x)
    smaller = readme_acls(text.replace(line, ""))
    assert ("fleet", "topic", "__consumer_offsets", "READ") not in smaller
    assert ("fleet", "topic", "__consumer_offsets", "READ") in readme_acls(text)


def pre_0_10_acls(text: str) -> set[tuple[str, str, str, str]]:
    """The rows of docs/security.md's 0.9 table: | `principal` | Type `name` | Operation |."""
    rows = re.findall(r"^\| `([\w-]+)` \| (\w+) `([^`]+)` \| (\w+) \|$", text.split("| principal (0.9) |", 1)[1],
                      re.M)
    return set(rows)


def test_the_0_9_table_grants_exactly_the_lab_acls():
    documented = pre_0_10_acls(SECURITY.read_text())
    granted = {(user, kind, name, op) for user, acls in SSL_ACLS.items() for kind, name, op in acls}
    assert len(documented) >= 8
    assert documented == granted
    fewer = pre_0_10_acls(SECURITY.read_text().replace("| `fleet` | Group `*` | Read |\n", ""))
    assert ("fleet", "Group", "*", "Read") in granted - fewer  # the comparison can fail
