"""Segment files and cleaner checkpoints of a broker's log dirs.

A partition's folder <log.dir>/<topic>-<partition> holds segments named by their base offset
(00000000000000000000.log with its .index and, from 0.10.1, .timeindex); the segment with the
highest base offset is the active one. <log.dir>/cleaner-offset-checkpoint lists how far the
cleaner has cleaned each compacted partition (version line, count line, "topic partition offset").

`BrokerFiles` is the interface; `LocalBrokerFiles` reads local folders (the lab). A remote
implementation (e.g. over Airflow's SSH provider) provides the same three calls.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


@dataclass(frozen=True)
class Segment:
    log_dir: str
    topic: str
    partition: int
    base_offset: int
    size_bytes: int
    modified_at: dt.datetime
    is_active: bool

    def files(self) -> list[str]:
        """The segment's files that exist (.log, .index, .timeindex where present)."""
        folder = Path(self.log_dir) / f"{self.topic}-{self.partition}"
        return [str(folder / f"{self.base_offset:020d}{s}") for s in SEGMENT_SUFFIXES
                if (folder / f"{self.base_offset:020d}{s}").exists()]


class BrokerFiles(Protocol):
    def segments(self, topic: str, partition: int) -> list[Segment]: ...
    def cleaner_checkpoints(self) -> dict[tuple[str, str, int], int]: ...
    def partitions(self, topic: str) -> list[tuple[str, int]]: ...


def parse_checkpoint(text: str, source: str = "cleaner-offset-checkpoint") -> dict[tuple[str, int], int]:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return {}
    if lines[0] != "0":
        raise ValueError(f"{source}: unknown checkpoint version {lines[0]!r}")
    out = {}
    for ln in lines[2:]:
        parts = ln.rsplit(" ", 2)
        if len(parts) != 3:
            raise ValueError(f"{source}: malformed line {ln!r}")
        out[(parts[0], int(parts[1]))] = int(parts[2])
    return out


class LocalBrokerFiles:
    def __init__(self, log_dirs: list[str] | tuple[str, ...]):
        self.log_dirs = [str(d) for d in log_dirs]

    def partitions(self, topic: str) -> list[tuple[str, int]]:
        out = []
        for d in self.log_dirs:
            if not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                if name.startswith(f"{topic}-") and name[len(topic) + 1:].isdigit():
                    out.append((d, int(name[len(topic) + 1:])))
        return sorted(out, key=lambda x: x[1])

    def segments(self, topic: str, partition: int) -> list[Segment]:
        for d in self.log_dirs:
            folder = Path(d) / f"{topic}-{partition}"
            if not folder.is_dir():
                continue
            found = []
            for entry in os.scandir(folder):
                m = SEGMENT_RE.match(entry.name)
                if m:
                    st = entry.stat()
                    found.append((int(m.group(1)), st.st_size, st.st_mtime))
            found.sort()
            return [Segment(d, topic, partition, base, size,
                            dt.datetime.fromtimestamp(mtime, dt.timezone.utc), i == len(found) - 1)
                    for i, (base, size, mtime) in enumerate(found)]
        return []

    def cleaner_checkpoints(self) -> dict[tuple[str, str, int], int]:
        out = {}
        for d in self.log_dirs:
            f = Path(d) / "cleaner-offset-checkpoint"
            if f.exists():
                for (topic, p), off in parse_checkpoint(f.read_text(), str(f)).items():
                    out[(d, topic, p)] = off
        return out


def sha256_file(path: str, chunk: int = 4 * 1024 * 1024) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)
