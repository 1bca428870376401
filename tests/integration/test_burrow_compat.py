"""The fleet page's Burrow API against the real Burrow: Debian's Burrow 1.2.1 (`make system-deps`
installs the package; its service is never started) reads the lab's Kafka 3.9 cluster while the
toolkit collects the same cluster and judges it (three collections, the stuck job in process into
reports/stuck/latest, as the scheduled run writes it); then every read endpoint of both is asked
the same question and their JSON compared key for key: the same keys, nesting and types, and the
same numbers where both see the same thing (log end offsets, lags, partition counts). Statuses may
differ only where docs/burrow.md says the toolkit's verdict is the better one: a live member stuck
on a record is STALL for the toolkit, STOP for Burrow (it sees no commit and cannot tell); a group
whose name holds a space is NOTFOUND for Burrow 1.2.1, judged by the toolkit.

How Burrow 1.2.1 reaches the secured lab: SASL/PLAIN as the read-only `fleet` user (its sarama
speaks no SCRAM) over TLS, with a client certificate signed by the lab CA (Burrow 1.2.1 reads a CA
file only beside a certificate and key; the broker does not ask for one and names the connection by
its SASL login), verifying the brokers' certificates; `kafka-version` 2.1.0, the newest it knows.
Burrow keeps its own state in a ZooKeeper of its own (ZooKeeper 3.8 from the lab's Kafka 3.9.2 jars,
the port plan's `burrow_zookeeper`): the lab's 3.9 ZooKeeper requires a SASL login, which Burrow
1.2.1's ZooKeeper client cannot give. Both are started here on 127.0.0.1 and stopped by PID."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleetlab import dists, ports, procs, tls
from fleetlab.traffic import ConsumerThread

from tests.integration.fleet_clusters import GENERATIONS, Target
from tests.helpers import wait_until

pytestmark = [pytest.mark.lab, pytest.mark.timeout(900)]

BURROW = shutil.which("Burrow") or "/usr/bin/Burrow"
#: where the two answers may differ in type: the toolkit publishes no connection's TLS or SASL
#: settings (docs/burrow.md), Burrow shows its own client profile's
NULL_ON_OUR_SIDE = {"module.client-profile.tls", "module.client-profile.sasl"}


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.read().decode(), r.headers.get("content-type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers.get("content-type", "")


def _zookeeper_serving(port: int) -> bool:
    """ZooKeeper answers `srvr` with its mode once it serves sessions (it takes connections, and
    closes them, a moment before: Burrow gives up at its first refused session)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"srvr")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
    return b"Mode:" in answer


@pytest.fixture(scope="module")
def lab39(lab_fleet) -> Target:
    return Target(lab_fleet(GENERATIONS["3.9"]))


@pytest.fixture(scope="module")
def burrow(lab39, tmp_path_factory):
    """Burrow 1.2.1 reading the 3.9 lab (as `fleet`), with its own ZooKeeper: its base URL."""
    if not Path(BURROW).exists():
        pytest.fail("Burrow is not installed: `make system-deps` installs Debian's package `burrow`")
    plan, spec = ports.tests(), lab39.handle.spec
    folder = tmp_path_factory.mktemp("burrow")
    # its ZooKeeper
    home = dists.ensure("3.9.2")
    (folder / "zk").mkdir()
    zk_cfg = folder / "zoo.cfg"
    zk_cfg.write_text(f"dataDir={folder / 'zk'}\nclientPort={plan.burrow_zookeeper}\nclientPortAddress=127.0.0.1\n"
                      "tickTime=2000\nadmin.enableServer=false\n")
    zk_pid = folder / "zookeeper.pid"
    procs.start(["java", "-Xmx128m", "-Djava.awt.headless=true", "-cp", f"{home}/libs/*",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(zk_cfg)], zk_pid, folder / "zookeeper.out")
    burrow_pid = folder / "burrow.pid"
    try:
        wait_until(lambda: _zookeeper_serving(plan.burrow_zookeeper), 60, "Burrow's ZooKeeper serving",
                   retry_on=(OSError,))
        cert, key = tls.make_client_cert(folder / "tls", spec.tls_dir / "ca.pem", spec.tls_dir / "ca.key",
                                         {"CN": "burrow", "O": "fleetlab"}, "burrow")
        servers = json.dumps(spec.bootstrap.split(","))
        name = spec.name
        (folder / "burrow.toml").write_text(f"""
[general]
pidfile="{folder / 'burrow.run.pid'}"

[logging]
level="info"

[zookeeper]
servers=["127.0.0.1:{plan.burrow_zookeeper}"]
timeout=6
root-path="/burrow"

[client-profile.lab]
client-id="burrow-compat-test"
kafka-version="2.1.0"
tls="lab"
sasl="lab"

[tls.lab]
certfile="{cert}"
keyfile="{key}"
cafile="{spec.tls_dir / 'ca.pem'}"
noverify=false

[sasl.lab]
username="fleet"
password={json.dumps(spec.passwords()["fleet"])}
handshake-first=true

[cluster.{name}]
class-name="kafka"
servers={servers}
client-profile="lab"
topic-refresh=2
offset-refresh=2

[consumer.{name}]
class-name="kafka"
cluster="{name}"
servers={servers}
client-profile="lab"
offsets-topic="__consumer_offsets"
start-latest=false

[storage.default]
class-name="inmemory"
intervals=10
min-distance=1
expire-group=604800

[evaluator.default]
class-name="caching"
expire-cache=1

[httpserver.default]
address="127.0.0.1:{plan.burrow}"
""")
        (folder / "burrow.toml").chmod(0o600)  # (a password)
        procs.start([BURROW, "-config-dir", str(folder)], burrow_pid, folder / "burrow.out")
        base = f"http://127.0.0.1:{plan.burrow}"
        try:
            wait_until(lambda: _get(f"{base}/burrow/admin")[0] == 200, 60, "Burrow's HTTP server",
                       retry_on=(OSError,))
        except Exception:
            print((folder / "burrow.out").read_text()[-5000:])
            raise
        yield {"base": base, "cluster": name, "log": folder / "burrow.out"}
    finally:
        print(f"burrow: {procs.stop(burrow_pid, str(folder))}")
        print(f"burrow's zookeeper: {procs.stop(zk_pid, str(zk_cfg))}")


@pytest.fixture
def toolkit_api(lab39, tmp_path, monkeypatch):
    """The fleet page's FastAPI app over the test's data root (login and DAG read check stood in
    for: tests/unit/test_burrow.py and test_metrics_endpoint.py check them)."""
    from fleet_airflow import fleet_page
    from fleet_airflow.web_auth import reader

    root = tmp_path / "data"
    monkeypatch.setenv("FLEET_DATA_ROOT", str(root))
    monkeypatch.setenv("FLEET_FILE", str(lab39.handle.fleet_file))
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    monkeypatch.setattr(fleet_page, "require_dag_read", lambda user, dag: None)
    app = fleet_page.fleet_app()
    app.dependency_overrides[reader] = lambda: "reader"
    client = TestClient(app)
    client.root = str(root)
    return client


def shape_differences(ours, theirs, path: str = "") -> list[str]:
    """Where two answers differ in keys, nesting or type (numbers are one type: Go writes a whole
    float32 as 1). Lists compare their first non-null items (Burrow's offset ring starts with nulls
    until it is full); an empty list against a full one says nothing of its items."""
    def kind(v):
        return ("null" if v is None else "bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float))
                else "string" if isinstance(v, str) else "list" if isinstance(v, list) else "object")

    if kind(ours) != kind(theirs):
        return [f"{path}: {kind(ours)} vs {kind(theirs)}"]
    if isinstance(ours, dict):
        out = [f"{path}.{k}: only ours" for k in ours.keys() - theirs.keys()]
        out += [f"{path}.{k}: only Burrow's" for k in theirs.keys() - ours.keys()]
        for k in ours.keys() & theirs.keys():
            out += shape_differences(ours[k], theirs[k], f"{path}.{k}".lstrip("."))
        return sorted(out)
    if isinstance(ours, list):
        a, b = [x for x in ours if x is not None], [x for x in theirs if x is not None]
        return shape_differences(a[0], b[0], f"{path}[]") if a and b else []
    return []


def test_the_toolkits_burrow_api_answers_as_burrow_does(lab39, burrow, toolkit_api, unique):
    from fleet_airflow import clusters
    from fleetkit.stuck import inprocess, rules

    t, cluster, base = lab39, burrow["cluster"], burrow["base"]
    topic = unique("burrow")
    # caught up; committed at 2 of 5 with nobody consuming; committed at 2 with a live member that
    # never gets past its record (a name both must take path-encoded; no space: Burrow 1.2.1's
    # evaluator keys its cache by "<cluster> <group>" and answers NOTFOUND for a name with one)
    ok, stopped, stalled = unique("burrow-ok"), unique("burrow-stopped"), unique('burrow-stalled-"q"-\U0001F600')
    t.wait_topic(topic)
    t.produce(topic, {0: 5, 1: 5, 2: 5})

    def path(segments) -> str:
        return "/v3/kafka" + "".join("/" + urllib.parse.quote(s, safe="") for s in segments)

    def burrows(*segments: str) -> tuple[int, dict | str]:
        status, body, ctype = _get(base + path(segments))
        return status, (json.loads(body) if ctype.startswith("application/json") else body)

    def ours(*segments: str) -> tuple[int, dict | str]:
        r = toolkit_api.get("/burrow" + path(segments))
        return r.status_code, (r.json() if r.headers["content-type"] == "application/json" else r.text)

    def burrow_read_the_topic() -> bool:
        status, body = burrows(cluster, "topic", topic)
        return status == 200 and body["offsets"] == [5, 5, 5]

    try:
        # Burrow drops the commits of a partition whose log end offset it has not read yet
        wait_until(burrow_read_the_topic, 60, "Burrow reading the topic")
    except Exception:
        print(burrow["log"].read_text()[-5000:])
        raise
    spaced = unique("burrow ok with spaces")  # caught up too
    t.commit(ok, {(topic, p): 5 for p in range(3)})
    t.commit(spaced, {(topic, p): 5 for p in range(3)})
    t.commit(stopped, {(topic, p): 2 for p in range(3)})
    t.commit(stalled, {(topic, p): 2 for p in range(3)})
    member = ConsumerThread(t.bootstrap, stalled, [topic], handle=lambda msg: False, client_id="burrow-compat",
                            kafka_version=t.version, security=t.admin_login)
    member.start()
    try:
        wait_until(lambda: member.assigned, 60, "the stalled group's member assigned")
        wait_until(lambda: all(burrows(cluster, "consumer", g, "lag")[0] == 200 for g in (ok, stopped, stalled)),
                   60, "Burrow knowing the three groups")
        # the toolkit: three collections about 4 s apart, judged as of the newest over a window that
        # holds them (as tests/ui/conftest.py's `stalled` does with the Spark job)
        snaps = []
        for i in range(3):
            snaps.append(clusters.collect(t.cluster, toolkit_api.root))
            if i < 2:
                time.sleep(4)
        window = dt.timedelta(seconds=int((snaps[-1].observed_at - snaps[0].observed_at).total_seconds()) + 2)
        inprocess.run(f"{toolkit_api.root}/offsets_snapshots", f"{toolkit_api.root}/reports/stuck/latest", window,
                      snaps[-1].observed_at, rules.DEFAULT_LAG_GROWTH_RATIO, rules.DEFAULT_OFFSETS_RETENTION)

        # every route, both sides: the shapes, then what both must see alike
        for segments in ([], [cluster], [cluster, "consumer"], [cluster, "topic"], [cluster, "topic", topic],
                         [cluster, "topic", topic, "consumers"],
                         *[[cluster, "consumer", g, *end] for g in (ok, stopped, stalled)
                           for end in ([], ["status"], ["lag"])]):
            (code, mine), (their_code, theirs) = ours(*segments), burrows(*segments)
            assert (code, their_code) == (200, 200), (segments, mine, theirs)
            differences = shape_differences(mine, theirs)
            allowed = [d for d in differences if d.split(":")[0] in NULL_ON_OUR_SIDE and d.endswith(": null vs object")]
            assert differences == allowed, (segments, differences)
            assert mine["error"] is theirs["error"] is False and mine["message"] == theirs["message"], segments

        assert cluster in ours()[1]["clusters"] and cluster in burrows()[1]["clusters"]
        assert ours(cluster)[1]["module"]["class-name"] == burrows(cluster)[1]["module"]["class-name"] == "kafka"
        for answer in (ours, burrows):
            assert {ok, stopped, stalled} <= set(answer(cluster, "consumer")[1]["consumers"])
            assert {ok, stopped, stalled} <= set(answer(cluster, "topic", topic, "consumers")[1]["consumers"])
            assert topic in answer(cluster, "topic")[1]["topics"]
            assert answer(cluster, "topic", topic)[1]["offsets"] == [5, 5, 5]
        # each group: its offsets and lags, and its statuses
        expected = {ok: ("OK", "OK", 0), stopped: ("ERR", "STOP", 3), stalled: ("ERR", "STALL", 3)}
        for g, (group_word, partition_word, lag) in expected.items():
            for answer, side in ((ours, "ours"), (burrows, "Burrow's")):
                detail = answer(cluster, "consumer", g)[1]["topics"]
                assert list(detail) == [topic], (side, g)
                assert [p["current-lag"] for p in detail[topic]] == [lag] * 3, (side, g, detail)
                assert [[o for o in p["offsets"] if o][-1]["offset"] for p in detail[topic]] == [5 - lag] * 3, (side, g)
                s = answer(cluster, "consumer", g, "lag")[1]["status"]
                assert (s["cluster"], s["group"], s["partition_count"], s["totallag"]) == (cluster, g, 3, 3 * lag)
                assert s["maxlag"]["current_lag"] == lag and s["maxlag"]["topic"] == topic
                assert [(p["topic"], p["partition"], p["current_lag"]) for p in
                        sorted(s["partitions"], key=lambda p: p["partition"])] == [(topic, p, lag) for p in range(3)]
                words = {p["status"] for p in s["partitions"]}
                # the one difference: Burrow sees no commit from the stuck member and calls it STOP
                want = "STOP" if (side, g) == ("Burrow's", stalled) else partition_word
                assert (s["status"], words) == (group_word, {want}), (side, g, s)
                flagged = answer(cluster, "consumer", g, "status")[1]["status"]["partitions"]
                assert len(flagged) == (0 if group_word == "OK" else 3), (side, g)

        # a name with a space: Burrow 1.2.1 stores its offsets, but its evaluator cannot look the
        # group up (NOTFOUND); the toolkit judges it as any other
        assert burrows(cluster, "consumer", spaced)[0] == 200
        code, theirs = burrows(cluster, "consumer", spaced, "status")
        assert code == 404 and theirs["status"]["status"] == "NOTFOUND"
        code, mine = ours(cluster, "consumer", spaced, "status")
        assert code == 200 and mine["status"]["status"] == "OK" and mine["status"]["partition_count"] == 3

        # what neither knows: the same 404s
        for segments in ([f"no-such-{cluster}"], [f"no-such-{cluster}", "consumer"], [cluster, "topic", "no-such-topic"],
                         [cluster, "consumer", "no-such-group"]):
            (code, mine), (their_code, theirs) = ours(*segments), burrows(*segments)
            assert code == their_code == 404 and shape_differences(mine, theirs) == [], (segments, mine, theirs)
            assert (mine["error"], mine["message"]) == (theirs["error"], theirs["message"]), segments
        code, mine = ours(cluster, "consumer", "no-such-group", "status")
        their_code, theirs = burrows(cluster, "consumer", "no-such-group", "status")
        assert code == their_code == 404 and shape_differences(mine, theirs) == []
        assert mine["status"]["status"] == theirs["status"]["status"] == "NOTFOUND"
        assert {k: v for k, v in mine["status"].items()} == {k: v for k, v in theirs["status"].items()}
        assert ours(cluster, "group") == burrows(cluster, "group")  # no such route: the same catch-all
    finally:
        member.stop()
