"""Capture __consumer_offsets test vectors from the real lab brokers (3.9 and 4.x).

    FLEET_TEST_PORT_OFFSET=N .venv/bin/python tests/vectors/capture_offsets_vectors.py [lab39test lab43test]

Starts (or reuses) the test fleet's clusters, notes the log end of every __consumer_offsets
partition, writes the scenario of tests/offsets_records_scenario.py (simple commits, a classic
group, a committed and an aborted transaction, on 4.x a consumer-protocol group), then fetches
the new bytes of the scenario's partitions on the wire and stores them, as the broker sent them
(record batches v2, control batches included), in tests/vectors/offsets_records_<cluster>.json
with every record's raw key and value and what the scenario expects. tests/unit/test_offsets_vectors.py
decodes them without a broker.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "include")]

from tests.conftest import TEST_FLEET  # noqa: E402
from tests import offsets_records_scenario  # noqa: E402
from fleetlab.lab import Lab  # noqa: E402
from fleetkit.clients import wire_logs  # noqa: E402
from tests.helpers import fleet_kafka  # noqa: E402
from fleetkit.core.kafka_names import OFFSETS_TOPIC  # noqa: E402


def capture(name: str) -> Path:
    spec = TEST_FLEET[name]
    lab = Lab(spec)
    lab.up()
    version = lab.spec.fleet_cluster()["kafka_version"]
    kafka = fleet_kafka(spec)  # the toolkit's connection (the read-only fleet user where secured)
    before = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in range(50)])
    expect = offsets_records_scenario.run(spec.bootstrap, version, lambda t: lab.create_topic(t, 3),
                                          prefix=f"vec{version.replace('.', '')}",
                                          security=spec.security_config("admin"))
    after = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in expect["partitions"]])
    parts = {}
    for p in expect["partitions"]:
        start, end = before[(OFFSETS_TOPIC, p)][1], after[(OFFSETS_TOPIC, p)][1]
        answers: list[bytes] = []

        def keep(_p, data, answers=answers):
            answers.append(data)
            recs: list = []
            return wire_logs.parse_batches(data, wire_logs.BatchStats(), recs, [])

        problems = wire_logs.fetch_log(spec.bootstrap, OFFSETS_TOPIC, {p: (start, end)}, keep,
                                       security=kafka.wire_security)
        if problems:
            raise SystemExit(f"{name}: {problems}")
        records: list = []
        control: list = []
        for a in answers:
            wire_logs.parse_batches(a, wire_logs.BatchStats(), records, control)
        parts[str(p)] = {
            "start": start, "end": end,
            "fetch_answers_base64": [base64.b64encode(a).decode() for a in answers],
            "records": [{"offset": o, "key": k.hex() if k is not None else None,
                         "value": v.hex() if v is not None else None, "producer_id": pid}
                        for o, k, v, pid in records if start <= o < end],
            "control": [{"offset": o, "producer_id": pid, "type": kind} for o, pid, kind in control
                        if start <= o < end],
        }
    expect_json = {"topic": expect["topic"], "partitions": expect["partitions"],
                   "groups": {g: {**e, "latest": [[t, q, o] for (t, q), o in sorted(e["latest"].items())]}
                              for g, e in expect["groups"].items()}}
    out = REPO / "tests" / "vectors" / f"offsets_records_{name}.json"
    out.write_text(json.dumps({"cluster": name, "kafka_version": version,
                               "captured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                               "expect": expect_json, "partitions": parts}, indent=1) + "\n")
    return out


if __name__ == "__main__":
    for n in sys.argv[1:] or ["lab39test", "lab43test"]:
        print(capture(n))
