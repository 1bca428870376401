"""Where a trimmed segment's files are and where they go: which files make a segment on a broker
of each version, in the order they move, and the quarantine folder of a replica. Shared by the
plan (what it lists and renders) and the execution (what it moves); no cluster access here.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.settings import safe_component

#: the order of a segment's files: index files first, the .log last, so that a move stopped between
#: two files leaves the segment whole in the log dir (Kafka rebuilds a missing index, but deletes
#: an index whose .log is gone).
FILE_ORDER = (".index", ".timeindex", ".log")
#: From 0.11 (plans record it as details.file_suffixes) a segment may also have a transaction index (.txnindex,
#: the aborted transactions of the segment) and a producer-state snapshot named by the segment's
#: base offset (.snapshot): on start-up the broker deletes snapshots that match no segment
#: (ProducerStateManager.removeStraySnapshots), so they move with their segment and come back
#: with it. A file that does not exist (0.9 writes neither) is skipped. leader-epoch-checkpoint
#: stays: on start-up the broker truncates it from the new log start itself
#: (LeaderEpochFileCache.truncateFromStart keeps the epoch in force at the log start).
FILE_ORDER_0_11 = (".index", ".timeindex", ".txnindex", ".snapshot", ".log")


def file_suffixes(version: tuple[int, ...]) -> tuple[str, ...]:
    """The files of a segment on a broker of this version, in move order."""
    return FILE_ORDER_0_11 if tuple(version) >= (0, 11) else FILE_ORDER


def quarantine_folder(root: str | os.PathLike, run_id: str, broker: int, partition: int) -> Path:
    """<quarantine>/<run>/broker-<id>/__consumer_offsets-<p>: one folder per replica, so the
    same-named segments of two partitions never meet."""
    return Path(root) / safe_component(run_id) / f"broker-{int(broker)}" / f"{OFFSETS_TOPIC}-{int(partition)}"


#: the quarantine of a broker reached over SSH (access: ssh) is on its host, a sibling of each log
#: dir: <log dir>.fleet-quarantine/<run>/broker-<id>/__consumer_offsets-<p>/
HOST_QUARANTINE_SUFFIX = ".fleet-quarantine"


def host_quarantine_root(log_dir: str) -> str:
    """Where a broker host keeps the files a trim moves out of `log_dir`: the folder beside it,
    `<log dir>.fleet-quarantine` (e.g. /var/lib/kafka/data.fleet-quarantine), on the broker host,
    in the same parent folder and so normally on the same file system: every move is a rename there
    (a quarantine on another file system is refused at the first move, nothing copied), and a
    restore puts the very same bytes back. Not inside the log dir: Kafka takes every folder there
    for a partition."""
    return str(log_dir).rstrip("/") + HOST_QUARANTINE_SUFFIX


def kraft(cluster) -> bool:
    """The cluster runs in KRaft mode (no ZooKeeper, 2.8 or later): stopping a broker may cost
    its controller quorum a voter, which the plan records and the execution checks."""
    return cluster.zookeeper is None and cluster.version_tuple >= (2, 8)
