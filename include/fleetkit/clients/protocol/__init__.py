"""The Kafka protocol as the toolkit speaks it, in three layers that import downwards only:

* `schema`: the field types and the one encoder / decoder (classic and flexible versions);
* `messages`: every request and response spoken, declared per version like Kafka's message specs;
* `transport`: connections, ApiVersions, the SASL login (fleetkit.clients.wire_security), the
  version both sides speak, pipelining, the first bootstrap server that answers.

The clients on top ask the questions: `fleetkit.clients.wire` (coordinators, groups, partition
leaders), `wire_logs` (Fetch, DescribeLogDirs, DescribeQuorum), `wire_leadership` (partition
reassignments).
"""
