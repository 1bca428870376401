"""Exceptions shared by the domain library. Every message names the input that caused it."""


class FleetError(Exception):
    """Base class of every error the toolkit raises on purpose."""


class FleetConfigError(FleetError):
    """The fleet file is invalid. The message names the file and the field."""


class ClusterUnreachable(FleetError):
    """A cluster (Kafka or ZooKeeper) did not answer."""


class LabError(FleetError):
    """The lab fleet could not be started, stopped or inspected."""


class AuthenticationFailed(FleetError):
    """A broker refused the login: "authentication failed for <user> on <cluster>: <reason>"."""


class TlsHandshakeFailed(FleetError):
    """The TLS handshake with a broker failed (certificate not trusted, wrong host name, ...)."""


class NotAuthorized(FleetError):
    """A broker refused an operation on a resource to a principal (a missing ACL), in one line:
    "not authorized: fleet may not DESCRIBE group 'billing' on prod (GROUP_AUTHORIZATION_FAILED)".

    `operation` is the ACL operation (Kafka's AclOperation name: READ, DESCRIBE, ...), the resource
    is its type (topic, group, cluster, ...) and name, `principal` the one the broker saw
    ("User:fleet"). The resource name comes from the cluster (hostile input): it is shown through
    core.render.visible_controls. `resource` is "<type> <name>"."""

    def __init__(self, operation: str, resource_type: str, resource_name: str, principal: str,
                 cluster: str | None = None, error: str | None = None):
        from fleetkit.core.render import visible_controls

        self.operation, self.principal, self.cluster, self.error = operation.upper(), principal, cluster, error
        self.resource_type, self.resource_name = resource_type, resource_name
        self.resource = f"{resource_type} {resource_name}"
        who = principal[len("User:"):] if principal.startswith("User:") else principal
        on = f" on {cluster}" if cluster else ""
        why = f" ({error})" if error else ""
        super().__init__(f"not authorized: {visible_controls(who)} may not {self.operation} {resource_type} "
                         f"'{visible_controls(resource_name)}'{on}{why}")


#: Kafka's name of the cluster resource in ACLs (kafka-acls --cluster)
CLUSTER_RESOURCE = "kafka-cluster"

#: The one table of authorization refusals: Kafka's error name and the request that met it ->
#: (the ACL operation that request needs, the type of resource it is about). (error, None) is the
#: request-independent default. Every client (confluent-kafka, the wire client, the __consumer_offsets
#: reader) names a refusal through it (refused() below).
AUTHORIZATION_ERRORS: dict[tuple[str, str | None], tuple[str, str]] = {
    # Metadata, ListOffsets, OffsetFetch (per topic), DescribeLogDirs' topics
    ("TOPIC_AUTHORIZATION_FAILED", None): ("DESCRIBE", "topic"),
    ("TOPIC_AUTHORIZATION_FAILED", "Fetch"): ("READ", "topic"),          # the __consumer_offsets reader
    ("TOPIC_AUTHORIZATION_FAILED", "DescribeConfigs"): ("DESCRIBE_CONFIGS", "topic"),
    ("TOPIC_AUTHORIZATION_FAILED", "Produce"): ("WRITE", "topic"),
    ("TOPIC_AUTHORIZATION_FAILED", "DeleteRecords"): ("DELETE", "topic"),
    ("TOPIC_AUTHORIZATION_FAILED", "OffsetCommit"): ("READ", "topic"),   # a commit needs Read on the topic
    ("TOPIC_AUTHORIZATION_FAILED", "AlterConsumerGroupOffsets"): ("READ", "topic"),
    # FindCoordinator, DescribeGroups, ConsumerGroupDescribe, OffsetFetch
    ("GROUP_AUTHORIZATION_FAILED", None): ("DESCRIBE", "group"),
    ("GROUP_AUTHORIZATION_FAILED", "OffsetCommit"): ("READ", "group"),   # offset resets, simple commits
    ("GROUP_AUTHORIZATION_FAILED", "AlterConsumerGroupOffsets"): ("READ", "group"),
    ("GROUP_AUTHORIZATION_FAILED", "JoinGroup"): ("READ", "group"),
    ("GROUP_AUTHORIZATION_FAILED", "DeleteGroups"): ("DELETE", "group"),
    # Kafka 0.9's KafkaApis asks Read (not Describe) on the group for OffsetFetch (see PRE_0_10)
    ("GROUP_AUTHORIZATION_FAILED", "OffsetFetch (0.9)"): ("READ", "group"),
    # DescribeLogDirs, DescribeQuorum, DescribeCluster, ListGroups (older brokers), DescribeAcls
    ("CLUSTER_AUTHORIZATION_FAILED", None): ("DESCRIBE", "cluster"),
    ("CLUSTER_AUTHORIZATION_FAILED", "DescribeConfigs"): ("DESCRIBE_CONFIGS", "cluster"),
    ("CLUSTER_AUTHORIZATION_FAILED", "IncrementalAlterConfigs"): ("ALTER_CONFIGS", "cluster"),
    ("CLUSTER_AUTHORIZATION_FAILED", "AlterConfigs"): ("ALTER_CONFIGS", "cluster"),
    ("CLUSTER_AUTHORIZATION_FAILED", "AlterPartitionReassignments"): ("ALTER", "cluster"),
    ("CLUSTER_AUTHORIZATION_FAILED", "ElectLeaders"): ("ALTER", "cluster"),
    ("TRANSACTIONAL_ID_AUTHORIZATION_FAILED", None): ("DESCRIBE", "transactional id"),
    ("DELEGATION_TOKEN_AUTHORIZATION_FAILED", None): ("DESCRIBE", "delegation token"),
}


#: Requests whose ACL differs on brokers before 0.10 (no ApiVersions): request -> its key above.
#: Elsewhere 0.9 asks what later brokers ask (Describe on the cluster for ListGroups, on the group
#: for GroupCoordinator and DescribeGroups, on the topic for Metadata and Offsets; Read on the topic
#: for Fetch; Read on the group and the topic for OffsetCommit).
PRE_0_10: dict[str, str] = {"OffsetFetch": "OffsetFetch (0.9)"}


def authorization_error(error: str | None) -> bool:
    """True for Kafka's (and librdkafka's) names of an authorization refusal (a missing ACL)."""
    return bool(error) and any(error == e for e, _ in AUTHORIZATION_ERRORS)


def refused(error: str, resource_name: str | None, principal: str, cluster: str | None = None,
            request: str | None = None) -> NotAuthorized | None:
    """The NotAuthorized for an authorization error met by `request` on a resource (its name; the
    cluster's is implied), through AUTHORIZATION_ERRORS; None when `error` is not one."""
    if not authorization_error(error):
        return None
    operation, rtype = AUTHORIZATION_ERRORS.get((error, request)) or AUTHORIZATION_ERRORS[(error, None)]
    if rtype == "cluster":
        resource_name = CLUSTER_RESOURCE
    return NotAuthorized(operation, rtype, resource_name if resource_name is not None else "?", principal,
                         cluster, error)


def blind_summary(what: str, refusals: list[NotAuthorized], first: int = 3) -> str:
    """One line for several refusals of the same kind: "3 group(s) not seen: 'a', 'b', 'c'; not
    authorized: fleet may not DESCRIBE group 'a' on prod (GROUP_AUTHORIZATION_FAILED)" (names escaped)."""
    names = list(dict.fromkeys(r.resource_name for r in refusals))
    return f"{len(names)} {what}(s) not seen ({quoted_names(names, first)}): {refusals[0]}"


def quoted_names(names: list[str], first: int = 3) -> str:
    """"'a', 'b', 'c', ..." : the first names of a list, quoted and escaped for one line."""
    from fleetkit.core.render import visible_controls

    return ", ".join(f"'{visible_controls(n)}'" for n in names[:first]) + (", ..." if len(names) > first else "")


class ZooKeeperNotAuthorized(NotAuthorized):
    """ZooKeeper refused an operation on a znode to the connection's identity (NoAuth: the znode's
    ACL), in one line: "ZooKeeper refused <operation> on znode <path> for <identity> on cluster
    <name> (NoAuth: ...)". The identity is digest:<user>, sasl:<user> or anonymous, never a password."""

    def __init__(self, operation: str, znode: str, identity: str, cluster: str | None = None):
        self.operation, self.resource, self.principal, self.cluster = operation, znode, identity, cluster
        self.resource_type, self.resource_name = "znode", znode
        self.error = "NoAuth"
        from fleetkit.core.render import visible_controls

        on = f" on cluster {cluster!r}" if cluster else ""
        FleetError.__init__(self, f"ZooKeeper refused {operation} on {visible_controls(znode)} for "
                                  f"{visible_controls(identity)}{on} "
                                  "(NoAuth: the znode's ACL does not grant it)")
