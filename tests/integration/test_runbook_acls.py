"""The destructive steps need exactly the runbook principal's ACLs, and say which one is missing.

On the secured lab clusters (3.9 in ZooKeeper mode, 4.3 in KRaft mode; fleetlab.lab SECURED_ACLS):
every change a runbook sends through Kafka (offset commits and resets, the cleaner settings, and
on KRaft the leadership moves) succeeds as `fleet-runbook` and is refused to the read-only `fleet`
principal, the refusal in one line naming the principal, the ACL operation and the resource
(the README's Permissions section is the list an operator grants from).
"""

from __future__ import annotations

import pytest

from fleetkit.clients.leadership import AdminLeadership
from fleetkit.core.errors import NotAuthorized
from fleetkit.trim import cleaner_config

from tests.helpers import commit_when_led, fleet_kafka, runbook_kafka

pytestmark = pytest.mark.timeout(600)


def _opened(handle):
    topic, group = f"rights-orders-{handle.spec.name}", f"rights-billing-{handle.spec.name}"
    commit_when_led(handle.lab, topic, 2, {group: {0: 0, 1: 0}})
    fleet, runbook = fleet_kafka(handle.spec), runbook_kafka(handle.spec)
    yield handle.spec, topic, group, fleet, runbook
    fleet.close()
    runbook.close()


@pytest.fixture(params=["lab39test", "lab43test"], ids=["kafka-3.9", "kafka-4.3"])
def secured(request, lab_fleet):
    yield from _opened(lab_fleet(request.param))


@pytest.fixture
def kraft(lab_fleet):
    """Leadership moves through the Admin API: KRaft (ZooKeeper-mode clusters move it through
    /admin znodes, whose ACLs tests/integration/test_zk_acls.py covers)."""
    yield from _opened(lab_fleet("lab43test"))


def refusal(excinfo, operation: str, resource: str, cluster: str, error: str) -> str:
    line = str(excinfo.value)
    assert line == f"not authorized: fleet may not {operation} {resource} on {cluster} ({error})", line
    assert excinfo.value.principal == "User:fleet"
    return line


def test_offset_resets_need_read_on_the_group(secured):
    spec, topic, group, fleet, runbook = secured
    with pytest.raises(NotAuthorized) as e:
        fleet.alter_offsets(group, {(topic, 0): 0})
    refusal(e, "READ", f"group '{group}'", spec.name, "GROUP_AUTHORIZATION_FAILED")
    with pytest.raises(NotAuthorized) as e:
        fleet.commit_offsets(group, {(topic, 1): 0})
    refusal(e, "READ", f"group '{group}'", spec.name, "GROUP_AUTHORIZATION_FAILED")
    runbook.alter_offsets(group, {(topic, 0): 0})
    runbook.commit_offsets(group, {(topic, 1): 0})
    assert runbook.committed_offsets([group])[group] == {(topic, 0): 0, (topic, 1): 0}


def test_broker_settings_need_alter_configs_on_the_cluster(secured):
    spec, _topic, _group, fleet, _runbook = secured
    with pytest.raises(NotAuthorized) as e:
        cleaner_config.apply_live(fleet, {"log.cleaner.threads": 1}, [0])
    refusal(e, "ALTER_CONFIGS", "cluster 'kafka-cluster'", spec.name, "CLUSTER_AUTHORIZATION_FAILED")


def test_leadership_moves_on_kraft_need_alter_on_the_cluster(kraft):
    spec, topic, _group, fleet, runbook = kraft
    replicas = AdminLeadership(runbook).assignment(topic)[0]
    for step, call in (("AlterPartitionReassignments", lambda k: AdminLeadership(k).reassign(topic, 0, replicas, 30)),
                       ("ElectLeaders", lambda k: AdminLeadership(k).elect([(topic, 0)], 30))):
        with pytest.raises(NotAuthorized) as e:
            call(fleet)
        print(f"{step}: {e.value}")
        refusal(e, "ALTER", "cluster 'kafka-cluster'", spec.name, "CLUSTER_AUTHORIZATION_FAILED")
        call(runbook)  # the same replicas, the preferred leader leading: accepted, nothing moves
    assert AdminLeadership(runbook).assignment(topic)[0] == replicas
