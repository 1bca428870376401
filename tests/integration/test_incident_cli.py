"""fleetctl's incident commands on the lab fleet, run as a person runs them (the installed
`fleetctl`, a subprocess): lag, stuck, offsets dump; their exit codes and errors.

The history the verdicts need (snapshots of the last minutes) is written into the test's data root
the way a collection writes it; everything read "now" comes from the real cluster."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fleetkit.clients.kafka import client_config
from fleetkit.clients.offsets_codec import encode_group_key, encode_offset_key, encode_offset_value_v1
from fleetkit.core.datasets import DataRoot, write_collection
from fleetkit.core.partitioning import partition_for
from fleetlab import traffic

from tests.integration.fleet_clusters import GENERATIONS, Target, target_fixture
from tests.helpers import wait_until

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
FLEETCTL = str(REPO / ".venv" / "bin" / "fleetctl")

target = target_fixture(GENERATIONS)


def fleetctl(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([FLEETCTL, *argv], capture_output=True, text=True, timeout=timeout)


def history(root: str, t: Target, group: str, topic: str, committed: dict[int, int], log_end: dict[int, int],
            minutes: tuple[int, ...] = (12, 8, 4)) -> None:
    """Snapshots of a group without members at `committed`, `minutes` ago (what earlier collections
    would have written)."""
    now = dt.datetime.now(dt.timezone.utc)
    for m in minutes:
        at = now - dt.timedelta(minutes=m)
        rows = [{"cluster": t.cluster.name, "group": group, "topic": topic, "partition": p, "observed_at": at,
                 "committed_offset": c, "log_start_offset": 0, "log_end_offset": log_end[p],
                 "group_state": t.memberless_state, "assigned": False, "source": "kafka"}
                for p, c in committed.items()]
        write_collection(DataRoot(root), t.cluster.name, at, {"offsets_snapshots": rows})


def test_lag_and_stuck_read_now_and_judge_with_history(target: Target, data_root, unique):
    t = target
    topic = unique("lagged")
    t.wait_topic(topic)
    t.produce(topic, {0: 10, 1: 10, 2: 10})
    stopped, fine = unique("stopped 'group' $(x)"), unique("caught-up")
    t.commit(stopped, {(topic, 0): 3, (topic, 1): 10, (topic, 2): 4})
    t.commit(fine, {(topic, p): 10 for p in range(3)})
    history(data_root, t, stopped, topic, {0: 3, 1: 10, 2: 4}, {0: 10, 1: 10, 2: 10})

    out = fleetctl("lag", stopped, fine, "--cluster", t.cluster.name, "--data-root", data_root)
    assert out.returncode == 3, out.stderr  # something flagged
    lines = out.stdout.splitlines()
    # kafka-consumer-groups --describe's columns in its order, then the toolkit's
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                                "HOST", "CLIENT-ID", "LAG-TIME", "VERDICT"]
    assert len(lines) == 7 and "stopped 'group' $(x)" in out.stdout

    doc = json.loads(fleetctl("lag", stopped, fine, "--cluster", t.cluster.name, "--data-root", data_root,
                              "--json").stdout)
    got = {(r["group"], r["partition"]): r for r in doc["partitions"]}
    assert {k: (r["current_offset"], r["log_end_offset"], r["lag"]) for k, r in got.items()} == {
        (stopped, 0): (3, 10, 7), (stopped, 1): (10, 10, 0), (stopped, 2): (4, 10, 6),
        (fine, 0): (10, 10, 0), (fine, 1): (10, 10, 0), (fine, 2): (10, 10, 0)}
    assert got[(stopped, 0)]["verdict"] == got[(stopped, 2)]["verdict"] == "STOPPED"
    assert got[(stopped, 0)]["since"] and got[(stopped, 0)]["lag_seconds_kind"] in ("interpolated", "bounded")
    assert got[(stopped, 1)]["verdict"] == got[(fine, 0)]["verdict"] == "OK"

    # only the caught-up group: nothing flagged
    assert fleetctl("lag", fine, "--cluster", t.cluster.name, "--data-root", data_root).returncode == 0

    # stuck: the scheduled run's collection (every group), the same verdicts, only the flagged ones
    st = fleetctl("stuck", "--cluster", t.cluster.name, "--data-root", data_root, "--json")
    assert st.returncode == 3, st.stderr
    flagged = {(r["group"], r["partition"]): r["verdict"] for r in json.loads(st.stdout)["flagged"]
               if r["topic"] == topic}
    assert flagged == {(stopped, 0): "STOPPED", (stopped, 2): "STOPPED"}
    table = fleetctl("stuck", "--cluster", t.cluster.name, "--data-root", data_root)
    assert table.returncode == 3 and "STOPPED" in table.stdout and "start them" in table.stdout


CODECS = ("gzip", "snappy", "lz4", "zstd")


def test_offsets_dump_reads_every_codec_from_kafka_written_segments(target: Target, unique):
    """Records with __consumer_offsets' key and value layouts, produced with each codec Kafka has,
    land in segment files the broker wrote; the dump must give back every record, in order, with
    the batch's codec (0.9: message format v0, wrapper messages; 3.9/4.3: record batches v2)."""
    t = target
    for codec in CODECS:
        if codec == "zstd" and t.cluster.version_tuple < (2, 1):
            continue  # zstd arrived with Kafka 2.1
        topic = unique(f"dump-{codec}")
        t.wait_topic(topic)
        p = Producer(client_config({"bootstrap.servers": t.bootstrap, "compression.codec": codec,
                                    "linger.ms": 200, "batch.num.messages": 50, **t.admin_login}, t.version))
        sent = []
        for i in range(120):
            group = f"g-{codec} 'ü' {i % 7}"
            key = encode_offset_key(group, "orders", i % 3)
            value = None if i % 40 == 39 else encode_offset_value_v1(1000 + i, "m", 1_700_000_000_000 + i, 0)
            p.produce(topic, key=key, value=value, partition=0)
            sent.append((group, i % 3, None if value is None else 1000 + i))
        p.produce(topic, key=encode_group_key("only-a-key"), value=None, partition=0)
        sent.append(("only-a-key", None, None))
        assert p.flush(30) == 0
        segs = [f for f in t.handle.lab.spec.path.glob(f"broker-*/data/{topic}-0/*.log") if f.stat().st_size]
        assert segs, f"no segment of {topic}-0 under {t.handle.lab.spec.path}"
        out = fleetctl("offsets", "dump", "--segment", str(segs[0]))
        assert out.returncode == 0, out.stderr
        lines = [json.loads(x) for x in out.stdout.splitlines()]
        assert [x["offset"] for x in lines] == list(range(len(sent))), codec
        assert {x["compression"] for x in lines} == {codec}, (codec, {x["compression"] for x in lines})
        assert {x["magic"] for x in lines} == ({0} if t.cluster.version_tuple < (0, 10) else {2})
        assert [(x["key"]["group"], x["key"].get("partition"), x["value"] and x["value"]["offset"])
                for x in lines] == sent, codec
        assert lines[1]["value"]["commit_timestamp"] == 1_700_000_000_001 and lines[1]["key"]["kind"] == "offset_commit"
        assert "records" in out.stderr  # the summary line


def test_a_partition_dump_piped_into_head_ends_quietly_with_0(target: Target, unique):
    """`fleetctl offsets dump --cluster C --partition N | head -1` on each generation's listener (0.9
    mutual TLS, 3.9 and 4.3 SASL_SSL): the reader closing the pipe ends the dump with 0, quietly; it
    is nothing the cluster did (it was exit 4, "BrokenPipeError", on a SASL_SSL cluster)."""
    t = target
    topic, group = unique("dump-head"), unique("dump-head-group")
    t.wait_topic(topic)
    c = traffic.consumer(t.bootstrap, group, t.version, t.admin_login)
    try:
        for i in range(600):  # some 600 JSON lines on the group's partition: more than a pipe holds
            c.commit(offsets=[traffic.TopicPartition(topic, 0, i)], asynchronous=False)
    finally:
        c.close()
    partition = partition_for(group, t.cluster.offsets_topic_partitions)
    dump = subprocess.Popen([FLEETCTL, "offsets", "dump", "--cluster", t.cluster.name, "--partition", str(partition)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert json.loads(dump.stdout.readline())["offset"] >= 0
    dump.stdout.close()  # what head does after its line
    err = dump.stderr.read().decode()
    assert dump.wait(120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err and "error:" not in err, err


def test_bad_input_and_unreachable_cluster_exit_codes(tmp_path, lab):
    bad = fleetctl("lag", "g", "--cluster", "no-such-cluster")
    assert bad.returncode == 2 and "no cluster named 'no-such-cluster'" in bad.stderr
    assert fleetctl("lag", "--cluster", lab.spec.name).returncode == 2  # no group, no --all
    junk = tmp_path / "00000000000000000000.log"
    junk.write_bytes(b"\x00" * 8 + b"\x00\x00\x00\x05" + b"abcde")
    out = fleetctl("offsets", "dump", "--segment", str(junk))
    assert out.returncode == 2 and str(junk) in out.stderr and "entry size 5" in out.stderr
    assert fleetctl("offsets", "dump", "--segment", str(tmp_path / "missing.log")).returncode == 2

    # a cluster whose brokers do not answer: exit 4, naming it, within the timeout
    import yaml

    doc = yaml.safe_load(Path(lab.fleet_file).read_text())
    entry = dict(doc["clusters"][0], name="gone", kafka_conn_id="gone_kafka")
    entry.pop("zookeeper", None)
    entry.pop("offset_stores", None)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"version": 1, "clusters": [entry]}))
    env_conn = json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:9"}})
    out = subprocess.run([FLEETCTL, "lag", "g", "--cluster", "gone", "--fleet", str(fleet), "--timeout", "3"],
                         capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "AIRFLOW_CONN_GONE_KAFKA": env_conn})
    assert out.returncode == 4, (out.returncode, out.stderr)
    assert "gone" in out.stderr.splitlines()[-1]


def test_offsets_health_flags_a_partition_over_the_cleaners_capacity(lab, tmp_path, unique):
    """0.9 (before KAFKA-3894): a segment with more messages than one cleaner pass maps kills the
    cleaner. A fleet file stating a 2,400-byte dedupe buffer (90 keys a pass) and 200 commits of
    one group make its partition OVER_CAPACITY; the command reads the cluster now and says so."""
    from fleetkit.core.partitioning import partition_for

    from tests.conftest import TEST_FLEET, write_fleet_file

    fleet = write_fleet_file(TEST_FLEET[lab.spec.name], tmp_path / "fleet.yaml",
                             cleaner={"dedupe_buffer_size": 2400, "threads": 1, "io_buffer_load_factor": 0.9})
    t = Target(lab)
    topic, group = unique("health"), unique("many commits")
    t.wait_topic(topic)
    t.produce(topic, {0: 200})
    for i in range(1, 201):
        t.commit(group, {(topic, 0): i})
    out = fleetctl("offsets", "health", "--cluster", lab.spec.name, "--fleet", str(fleet), "--data-root",
                   str(tmp_path / "data"), "--json", timeout=600)
    assert out.returncode == 3, out.stderr[-3000:]
    replicas = json.loads(out.stdout)["replicas"]
    mine = [r for r in replicas if r["partition"] == partition_for(group, 50)]
    assert mine and all(r["verdict"] == "OVER_CAPACITY" for r in mine), mine
    assert json.loads(mine[0]["fix"])["log.cleaner.dedupe.buffer.size"] > 2400
    table = fleetctl("offsets", "health", "--cluster", lab.spec.name, "--fleet", str(fleet), "--data-root",
                     str(tmp_path / "data"), timeout=600)
    assert table.returncode == 3 and "OVER_CAPACITY" in table.stdout and "fix: log.cleaner.dedupe.buffer.size=" in table.stdout
    # on a terminal, the read of __consumer_offsets (from its start, into a new data root) shows a
    # progress bar on stderr; stdout is the same table
    from tests.helpers import on_a_terminal

    rc, out, shown = on_a_terminal([FLEETCTL, "offsets", "health", "--cluster", lab.spec.name, "--fleet", str(fleet),
                                    "--data-root", str(tmp_path / "data-2")], 600)
    assert rc == 3 and "OVER_CAPACITY" in out
    assert b"__consumer_offsets of " + lab.spec.name.encode() in shown and b"records" in shown, shown[-2000:]


def kafka_consumer_groups(t: Target, *argv: str) -> list[list[str]]:
    """Kafka's own kafka-consumer-groups (ConsumerGroupCommand from the generation's jars) on the lab
    node's PLAINTEXT inter-broker listener (the same groups as the secured one): its table's rows,
    split on blanks."""
    import shutil

    from fleetlab import dists

    home = dists.dist_dir(t.version)
    spec = t.handle.lab.spec
    out = subprocess.run([shutil.which("java") or "java", "-Xmx256m", "-cp", f"{home / 'libs'}/*",
                          "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                          "--bootstrap-server", f"127.0.0.1:{spec.internal_port(0)}", *argv],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return [line.split() for line in out.stdout.splitlines() if line.strip()]


def test_groups_list_state_and_members_as_kafka_consumer_groups_shows_them(target: Target, unique):
    """fleetctl groups --list / --state / --members on each generation (0.9 has no --state or
    --members in its own tool); on 3.9 and 4.3 the same header and the same values as Kafka's
    kafka-consumer-groups (the coordinator's host aside: Kafka's tool asks another listener)."""
    t = target
    name = t.cluster.name
    topic, live, idle = unique("groups"), unique("groups-live"), unique("groups-idle")
    t.wait_topic(topic)
    t.commit(idle, {(topic, 0): 1})
    member = t.consumer_thread(live, [topic], client_id="groups-client")
    member.start()
    try:
        def stable():
            out = fleetctl("groups", live, "--state", "--cluster", name, "--json")
            doc = json.loads(out.stdout) if out.returncode == 0 else {"groups": []}
            return [g for g in doc["groups"] if g["state"] == "Stable" and g["members"] == 1]
        (state,) = wait_until(stable, 60, f"{live} stable with its member")
        listed = fleetctl("groups", "--list", "--cluster", name)
        assert listed.returncode == 0 and live in listed.stdout.splitlines(), listed.stderr
        table = fleetctl("groups", live, idle, "--state", "--cluster", name)
        assert table.returncode == 0, table.stderr
        rows = [line.split() for line in table.stdout.splitlines()]
        assert rows[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        by_group = {r[0]: r for r in rows[1:]}
        coordinator = f"({state['coordinator_id']})"
        assert by_group[live][2:] == [coordinator, "range", "Stable", "1"], rows
        assert by_group[idle][3:] == ["-", t.memberless_state, "0"], rows
        members = fleetctl("groups", live, "--members", "--verbose-assignment", "--cluster", name)
        assert members.returncode == 0, members.stderr
        head, *mrows = [line.split() for line in members.stdout.splitlines()]
        assert head == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        ((group, consumer_id, host, client_id, partitions, assignment),) = mrows
        # the host as the broker reports it and Kafka's tool prints it (0.9 on its TLS listener: "localhost/...")
        assert host.endswith("/127.0.0.1"), host
        assert (group, client_id, partitions, assignment) == (live, "groups-client", "3", f"{topic}(0,1,2)")
        assert consumer_id.startswith("groups-client")
        if t.cluster.version_tuple < (3,):
            return
        theirs = kafka_consumer_groups(t, "--describe", "--group", live, "--state")
        assert theirs[0] == rows[0]
        assert theirs[1][0] == live and theirs[1][2:] == by_group[live][2:], (theirs, rows)
        # --members: the same five columns (--verbose's assignment columns differ between 3.9 and 4.x)
        theirs = kafka_consumer_groups(t, "--describe", "--group", live, "--members")
        assert theirs[0] == head[:5] and theirs[1] == [group, consumer_id, host, client_id, partitions], theirs
        assert live in [r[0] for r in kafka_consumer_groups(t, "--list")]
    finally:
        member.stop()
