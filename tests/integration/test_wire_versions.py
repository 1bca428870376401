"""The wire probe and the client settings against the real brokers of each generation: the
versions chosen per broker, and what the brokers answer."""

from __future__ import annotations



from fleetkit.clients import wire
from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol import transport
from fleetkit.clients.offsets_leaders import offsets_topic_state
from fleetkit.core.partitioning import partition_for
from fleetlab.traffic import ConsumerThread, commit, produce, wait_topic

from tests.helpers import GIVE_UP, committed_offsets, fleet_wire_security, not_waited_out, wait_until


def test_09_cannot_answer_api_versions_and_is_spoken_to_in_version_0(lab, unique):
    first = lab.bootstrap.split(",")[0]
    security = fleet_wire_security(lab.spec)  # the toolkit's login (0.9: mutual TLS)
    with not_waited_out():  # 0.9 stays silent: the wait is bounded (API_VERSIONS_TIMEOUT), not the call's timeout
        assert transport.broker_versions(first, timeout=GIVE_UP, security=security) is None

    topic, live, stopped = unique("wire"), unique("wire live ĝ {{x}}"), unique("wire stopped; rm -rf /")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 1, 1: 1, 2: 1})
    commit(lab.bootstrap, stopped, {(topic, 0): 1})
    member = ConsumerThread(lab.bootstrap, live, [topic], client_id="wire-client")
    member.start()
    try:
        wait_until(lambda: committed_offsets(lab.bootstrap, live, topic) == {0: 1, 1: 1, 2: 1}, 60, "live group caught up")
        known = wire.probe(lab.bootstrap, [live, stopped], timeout=10, api_versions=False, security=security)
        asked = wire.probe(lab.bootstrap, [live, stopped], timeout=10, security=security)
    finally:
        member.stop()
    with lab.zookeeper() as zk:
        states = {s.partition: s.leader for s in zk.partition_states(["__consumer_offsets"])[0]}
    for answers in (known, asked):
        for g in (live, stopped):
            assert answers[g].error is None
            assert answers[g].coordinator_id == states[partition_for(g, 50)]
        assert answers[live].state == "Stable"
        # 0.9 names the member's host as Java prints its address: "/127.0.0.1" on PLAINTEXT,
        # "localhost/127.0.0.1" on an SSL listener (the TLS session resolved the peer's name)
        assert [(c, h.rsplit("/", 1)[1]) for _, c, h in answers[live].members] == [("wire-client", "127.0.0.1")]
        assert all(h.endswith("/127.0.0.1") for _, _, h in answers[live].members)
        assert (answers[stopped].state, answers[stopped].members) == ("Dead", [])  # 0.9 forgets member-less groups


def test_each_generation_is_spoken_to_in_the_versions_it_accepts(generation_lab, unique):
    """ApiVersions per broker, then the highest common version: 0.9 version 0; 3.9 and 4.3
    FindCoordinator v4 (one request for many groups) and DescribeGroups v5 (flexible)."""
    spec = generation_lab.spec
    cluster = generation_lab.cluster
    security = fleet_wire_security(spec)  # the toolkit's login where the cluster is secured
    for i in range(spec.brokers):
        versions = transport.broker_versions(f"127.0.0.1:{spec.broker_port(i)}", timeout=10, security=security)
        if cluster.version_tuple < (0, 10):
            assert versions is None
        else:
            assert m.FIND_COORDINATOR.pick_version(versions) == 4
            assert m.DESCRIBE_GROUPS.pick_version(versions) == 5
            assert m.METADATA.pick_version(versions, wire.LEADER_EPOCHS_FROM) == 8
            # the log reader's and the secured login's requests: the newest spoken here on both
            assert (m.FETCH.pick_version(versions), m.DESCRIBE_LOG_DIRS.pick_version(versions)) == (11, 4)
            assert (m.SASL_HANDSHAKE.pick_version(versions), m.SASL_AUTHENTICATE.pick_version(versions)) == (1, 1)
            assert m.ALTER_PARTITION_REASSIGNMENTS.pick_version(versions) == 0
            # a ZooKeeper-mode broker offers no DescribeQuorum
            assert m.DESCRIBE_QUORUM.pick_version(versions) == (1 if cluster.version_tuple >= (4,) else None)

    from fleet_airflow import clusters

    topic, group = unique("wire-gen"), unique("wire gen ĝ {{x}}")
    generation_lab.lab.create_topic(topic, 3)
    admin = spec.security_config("admin")  # the lab's committer
    wait_topic(spec.bootstrap, topic, kafka_version=spec.kafka_version, security=admin)
    commit(spec.bootstrap, group, {(topic, 1): 1}, kafka_version=spec.kafka_version, security=admin)
    kafka = clusters.kafka_for(cluster)  # the Airflow hook, with the fleet file's kafka_version
    answers = kafka.coordinators([group])
    leaders = {s.partition: s.leader for s in offsets_topic_state(kafka, None).values()}
    a = answers[group]
    assert a.error is None and a.coordinator_id == leaders[partition_for(group, cluster.offsets_topic_partitions)]
    assert (a.state, a.members) == ("Dead" if cluster.version_tuple < (0, 10, 1) else "Empty", [])


def test_confluent_kafka_talks_to_each_generation_with_the_hooks_config(generation_lab, unique):
    """The hook's config: 0.9 gets api.version.request=false + broker.version.fallback, 3.9 and
    4.3 get neither, and librdkafka reads metadata, groups and offsets from each."""
    from fleet_airflow import clusters

    spec, cluster = generation_lab.spec, generation_lab.cluster
    kafka = clusters.kafka_for(cluster)
    old = cluster.version_tuple < (0, 10)
    assert ("api.version.request" in kafka.config, "broker.version.fallback" in kafka.config) == (old, old)
    topic, group = unique("cfg"), unique("cfg-group")
    generation_lab.lab.create_topic(topic, 3)
    admin = spec.security_config("admin")  # the lab's producer and committer
    wait_topic(spec.bootstrap, topic, kafka_version=spec.kafka_version, security=admin)
    produce(spec.bootstrap, topic, {0: 3, 1: 2, 2: 1}, kafka_version=spec.kafka_version, security=admin)
    commit(spec.bootstrap, group, {(topic, 0): 3, (topic, 2): 1}, kafka_version=spec.kafka_version, security=admin)
    md = kafka.metadata([topic])
    assert sorted(md.brokers) == [0, 1, 2] and len(md.topic_partitions(topic)) == 3
    assert kafka.committed_offsets([group])[group] == {(topic, 0): 3, (topic, 2): 1}
    assert kafka.log_offsets([(topic, p) for p in range(3)]) == {
        (topic, 0): (0, 3, None), (topic, 1): (0, 2, None), (topic, 2): (0, 1, None)}
    if not old:  # 0.9 does not list a group that never joined
        assert group in {g for g, _ in kafka.list_groups()}
