"""The requests and responses the toolkit speaks, declared per version as Kafka's message specs
declare them (clients/src/main/resources/common/message/<Name>{Request,Response}.json: the same
field names, types, versions, nullable versions and defaults; tagged fields left out).
`tests/unit/test_protocol_specs.py` compares every declaration here, version by version, with the
specs inside the kafka-clients jars of the lab's Kafka 3.9 and 4.3.

`Api.versions` are the versions spoken here (a broker is asked in the highest both speak);
`in_0_9` marks the APIs a broker that answers no ApiVersions (Kafka 0.9) knows, in version 0.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from fleetkit.clients.protocol.schema import NULL, F, Field, Reader, decode_from, encode_into, utf8


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    versions: tuple[int, int]
    flexible_from: int | None
    request: tuple[Field, ...]
    response: tuple[Field, ...]
    in_0_9: bool = False
    #: ApiVersions: the response header has no tagged fields even in flexible versions
    response_header_tags: bool = True

    def flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def pick_version(self, offered: dict[int, tuple[int, int]] | None, at_least: int = 0) -> int | None:
        """The highest version both a broker and this client speak, from `at_least` on.

        `offered` is the broker's ApiVersions answer ({api key: (min, max)}), or None for a broker
        that cannot answer ApiVersions (0.9: version 0 of the APIs it knows). None when there is no
        common version."""
        lo, hi = max(self.versions[0], at_least), self.versions[1]
        if offered is None:
            return 0 if self.in_0_9 and lo == 0 else None
        if self.key not in offered:
            return None
        lo, hi = max(lo, offered[self.key][0]), min(hi, offered[self.key][1])
        return hi if lo <= hi else None

    def encode_request(self, version: int, correlation_id: int, values: dict | None = None,
                       client_id: str = "fleetkit") -> bytes:
        """A size-prefixed request: header v1 (v2, with its empty tagged fields, in a flexible
        version; the client id keeps its int16 length in both), then the body."""
        flexible = self.flexible(version)
        client = utf8(client_id, "client id")
        out = bytearray(struct.pack(">ihhih", 0, self.key, version, correlation_id, len(client)) + client)
        if flexible:
            out.append(0)
        encode_into(out, self.request, values or {}, version, flexible)
        struct.pack_into(">i", out, 0, len(out) - 4)
        return bytes(out)

    def decode_response(self, version: int, payload: bytes) -> tuple[int, dict]:
        """(correlation id, the response's fields) of a response without its size prefix."""
        flexible = self.flexible(version)
        r = Reader(payload)
        cid = r.int32()
        if flexible and self.response_header_tags:
            r.skip_tags()
        return cid, decode_from(r, self.response, version, flexible)


API_VERSIONS = Api(18, "ApiVersions", (0, 0), 3, (), (
    F("ErrorCode", "int16"),
    F("ApiKeys", "[]ApiVersion", fields=(F("ApiKey", "int16"), F("MinVersion", "int16"), F("MaxVersion", "int16"))),
), response_header_tags=False)

FIND_COORDINATOR = Api(10, "FindCoordinator", (0, 4), 3, (
    F("Key", "string", "0-3"),
    F("KeyType", "int8", "1+", default=0),
    F("CoordinatorKeys", "[]string", "4+"),
), (
    F("ThrottleTimeMs", "int32", "1+"),
    F("ErrorCode", "int16", "0-3"),
    F("ErrorMessage", "string", "1-3", nullable="1-3"),
    F("NodeId", "int32", "0-3"),
    F("Host", "string", "0-3"),
    F("Port", "int32", "0-3"),
    F("Coordinators", "[]Coordinator", "4+", fields=(
        F("Key", "string", "4+"), F("NodeId", "int32", "4+"), F("Host", "string", "4+"), F("Port", "int32", "4+"),
        F("ErrorCode", "int16", "4+"), F("ErrorMessage", "string", "4+", nullable="4+"))),
), in_0_9=True)

DESCRIBE_GROUPS = Api(15, "DescribeGroups", (0, 5), 5, (
    F("Groups", "[]string"),
    F("IncludeAuthorizedOperations", "bool", "3+"),
), (
    F("ThrottleTimeMs", "int32", "1+"),
    F("Groups", "[]DescribedGroup", fields=(
        F("ErrorCode", "int16"),
        F("GroupId", "string"),
        F("GroupState", "string"),
        F("ProtocolType", "string"),
        F("ProtocolData", "string"),
        F("Members", "[]DescribedGroupMember", fields=(
            F("MemberId", "string"),
            F("GroupInstanceId", "string", "4+", nullable="4+", default=NULL),
            F("ClientId", "string"),
            F("ClientHost", "string"),
            F("MemberMetadata", "bytes"),
            F("MemberAssignment", "bytes"))),
        F("AuthorizedOperations", "int32", "3+", default=-2147483648))),
), in_0_9=True)

_TOPIC_PARTITIONS = (F("TopicId", "uuid"), F("TopicName", "string"), F("Partitions", "[]int32"))
_ASSIGNMENT = (F("TopicPartitions", "[]TopicPartitions", fields=_TOPIC_PARTITIONS),)

CONSUMER_GROUP_DESCRIBE = Api(69, "ConsumerGroupDescribe", (0, 1), 0, (
    F("GroupIds", "[]string"),
    F("IncludeAuthorizedOperations", "bool"),
), (
    F("ThrottleTimeMs", "int32"),
    F("Groups", "[]DescribedGroup", fields=(
        F("ErrorCode", "int16"),
        F("ErrorMessage", "string", nullable="0+", default=NULL),
        F("GroupId", "string"),
        F("GroupState", "string"),
        F("GroupEpoch", "int32"),
        F("AssignmentEpoch", "int32"),
        F("AssignorName", "string"),
        F("Members", "[]Member", fields=(
            F("MemberId", "string"),
            F("InstanceId", "string", nullable="0+", default=NULL),
            F("RackId", "string", nullable="0+", default=NULL),
            F("MemberEpoch", "int32"),
            F("ClientId", "string"),
            F("ClientHost", "string"),
            F("SubscribedTopicNames", "[]string"),
            F("SubscribedTopicRegex", "string", nullable="0+", default=NULL),
            F("Assignment", "Assignment", fields=_ASSIGNMENT),
            F("TargetAssignment", "Assignment", fields=_ASSIGNMENT),
            F("MemberType", "int8", "1+", default=-1))),
        F("AuthorizedOperations", "int32", default=-2147483648))),
))

METADATA = Api(3, "Metadata", (0, 8), 9, (
    F("Topics", "[]MetadataRequestTopic", nullable="1+", fields=(F("Name", "string"),)),
    F("AllowAutoTopicCreation", "bool", "4+", default=True),
    F("IncludeClusterAuthorizedOperations", "bool", "8-10"),
    F("IncludeTopicAuthorizedOperations", "bool", "8+"),
), (
    F("ThrottleTimeMs", "int32", "3+"),
    F("Brokers", "[]MetadataResponseBroker", fields=(
        F("NodeId", "int32"), F("Host", "string"), F("Port", "int32"), F("Rack", "string", "1+", nullable="1+", default=NULL))),
    F("ClusterId", "string", "2+", nullable="2+", default=NULL),
    F("ControllerId", "int32", "1+", default=-1),
    F("Topics", "[]MetadataResponseTopic", fields=(
        F("ErrorCode", "int16"),
        F("Name", "string"),
        F("IsInternal", "bool", "1+", default=False),
        F("Partitions", "[]MetadataResponsePartition", fields=(
            F("ErrorCode", "int16"),
            F("PartitionIndex", "int32"),
            F("LeaderId", "int32"),
            F("LeaderEpoch", "int32", "7+", default=-1),
            F("ReplicaNodes", "[]int32"),
            F("IsrNodes", "[]int32"),
            F("OfflineReplicas", "[]int32", "5+"))),
        F("TopicAuthorizedOperations", "int32", "8+", default=-2147483648))),
    F("ClusterAuthorizedOperations", "int32", "8-10", default=-2147483648),
), in_0_9=True)

FETCH = Api(1, "Fetch", (0, 11), 12, (
    F("ReplicaId", "int32", "0-14", default=-1),
    F("MaxWaitMs", "int32"),
    F("MinBytes", "int32"),
    F("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
    F("IsolationLevel", "int8", "4+", default=0),
    F("SessionId", "int32", "7+", default=0),
    F("SessionEpoch", "int32", "7+", default=-1),
    F("Topics", "[]FetchTopic", fields=(
        F("Topic", "string", "0-12"),
        F("Partitions", "[]FetchPartition", fields=(
            F("Partition", "int32"),
            F("CurrentLeaderEpoch", "int32", "9+", default=-1),
            F("FetchOffset", "int64"),
            F("LogStartOffset", "int64", "5+", default=-1),
            F("PartitionMaxBytes", "int32"))))),
    F("ForgottenTopicsData", "[]ForgottenTopic", "7+", fields=(
        F("Topic", "string", "7-12"), F("Partitions", "[]int32", "7+"))),
    F("RackId", "string", "11+", default=""),
), (
    F("ThrottleTimeMs", "int32", "1+"),
    F("ErrorCode", "int16", "7+"),
    F("SessionId", "int32", "7+", default=0),
    F("Responses", "[]FetchableTopicResponse", fields=(
        F("Topic", "string", "0-12"),
        F("Partitions", "[]PartitionData", fields=(
            F("PartitionIndex", "int32"),
            F("ErrorCode", "int16"),
            F("HighWatermark", "int64"),
            F("LastStableOffset", "int64", "4+", default=-1),
            F("LogStartOffset", "int64", "5+", default=-1),
            F("AbortedTransactions", "[]AbortedTransaction", "4+", nullable="4+", fields=(
                F("ProducerId", "int64", "4+"), F("FirstOffset", "int64", "4+"))),
            F("PreferredReadReplica", "int32", "11+", default=-1),
            F("Records", "records", nullable="0+"))))),
), in_0_9=True)

DESCRIBE_LOG_DIRS = Api(35, "DescribeLogDirs", (1, 4), 2, (
    F("Topics", "[]DescribableLogDirTopic", nullable="0+", fields=(F("Topic", "string"), F("Partitions", "[]int32"))),
), (
    F("ThrottleTimeMs", "int32"),
    F("ErrorCode", "int16", "3+"),
    F("Results", "[]DescribeLogDirsResult", fields=(
        F("ErrorCode", "int16"),
        F("LogDir", "string"),
        F("Topics", "[]DescribeLogDirsTopic", fields=(
            F("Name", "string"),
            F("Partitions", "[]DescribeLogDirsPartition", fields=(
                F("PartitionIndex", "int32"), F("PartitionSize", "int64"), F("OffsetLag", "int64"),
                F("IsFutureKey", "bool"))))),
        F("TotalBytes", "int64", "4+", default=-1),
        F("UsableBytes", "int64", "4+", default=-1))),
))

_REPLICA_STATE = (
    F("ReplicaId", "int32"),
    F("LogEndOffset", "int64"),
    F("LastFetchTimestamp", "int64", "1+", default=-1),
    F("LastCaughtUpTimestamp", "int64", "1+", default=-1),
)
DESCRIBE_QUORUM = Api(55, "DescribeQuorum", (0, 1), 0, (
    F("Topics", "[]TopicData", fields=(
        F("TopicName", "string"), F("Partitions", "[]PartitionData", fields=(F("PartitionIndex", "int32"),)))),
), (
    F("ErrorCode", "int16"),
    F("Topics", "[]TopicData", fields=(
        F("TopicName", "string"),
        F("Partitions", "[]PartitionData", fields=(
            F("PartitionIndex", "int32"),
            F("ErrorCode", "int16"),
            F("LeaderId", "int32"),
            F("LeaderEpoch", "int32"),
            F("HighWatermark", "int64"),
            F("CurrentVoters", "[]ReplicaState", fields=_REPLICA_STATE),
            F("Observers", "[]ReplicaState", fields=_REPLICA_STATE))))),
))

SASL_HANDSHAKE = Api(17, "SaslHandshake", (1, 1), None, (F("Mechanism", "string"),), (
    F("ErrorCode", "int16"), F("Mechanisms", "[]string")))

SASL_AUTHENTICATE = Api(36, "SaslAuthenticate", (0, 1), 2, (F("AuthBytes", "bytes"),), (
    F("ErrorCode", "int16"),
    F("ErrorMessage", "string", nullable="0+"),
    F("AuthBytes", "bytes"),
    F("SessionLifetimeMs", "int64", "1+", default=0),
))

ALTER_PARTITION_REASSIGNMENTS = Api(45, "AlterPartitionReassignments", (0, 0), 0, (
    F("TimeoutMs", "int32", default=60000),
    F("Topics", "[]ReassignableTopic", fields=(
        F("Name", "string"),
        F("Partitions", "[]ReassignablePartition", fields=(
            F("PartitionIndex", "int32"), F("Replicas", "[]int32", nullable="0+", default=NULL))))),
), (
    F("ThrottleTimeMs", "int32"),
    F("ErrorCode", "int16"),
    F("ErrorMessage", "string", nullable="0+"),
    F("Responses", "[]ReassignableTopicResponse", fields=(
        F("Name", "string"),
        F("Partitions", "[]ReassignablePartitionResponse", fields=(
            F("PartitionIndex", "int32"), F("ErrorCode", "int16"), F("ErrorMessage", "string", nullable="0+"))))),
))

LIST_PARTITION_REASSIGNMENTS = Api(46, "ListPartitionReassignments", (0, 0), 0, (
    F("TimeoutMs", "int32", default=60000),
    F("Topics", "[]ListPartitionReassignmentsTopics", nullable="0+", default=NULL, fields=(
        F("Name", "string"), F("PartitionIndexes", "[]int32"))),
), (
    F("ThrottleTimeMs", "int32"),
    F("ErrorCode", "int16"),
    F("ErrorMessage", "string", nullable="0+"),
    F("Topics", "[]OngoingTopicReassignment", fields=(
        F("Name", "string"),
        F("Partitions", "[]OngoingPartitionReassignment", fields=(
            F("PartitionIndex", "int32"), F("Replicas", "[]int32"), F("AddingReplicas", "[]int32"),
            F("RemovingReplicas", "[]int32"))))),
))

#: the consumer protocol's assignment (a DescribeGroups member's MemberAssignment bytes): a version
#: (int16), then these fields (ConsumerProtocolAssignment.json; later versions only append)
CONSUMER_PROTOCOL_ASSIGNMENT = (
    F("AssignedPartitions", "[]TopicPartition", fields=(F("Topic", "string"), F("Partitions", "[]int32"))),
    F("UserData", "bytes", nullable="0+", default=NULL),
)

APIS = {api.key: api for api in (API_VERSIONS, FIND_COORDINATOR, DESCRIBE_GROUPS, CONSUMER_GROUP_DESCRIBE, METADATA,
                                 FETCH, DESCRIBE_LOG_DIRS, DESCRIBE_QUORUM, SASL_HANDSHAKE, SASL_AUTHENTICATE,
                                 ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS)}
