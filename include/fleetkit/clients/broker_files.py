"""Segment files and cleaner checkpoints of a broker's log dirs.

A partition's folder <log.dir>/<topic>-<partition> holds segments named by their base offset
(00000000000000000000.log with its .index and, from 0.10.1, .timeindex); the segment with the
highest base offset is the active one. <log.dir>/cleaner-offset-checkpoint lists how far the
cleaner has cleaned each compacted partition (version line, count line, "topic partition offset").

`BrokerFiles` is the interface, of two parts: what the collection reads (partitions, segments,
cleaner checkpoints) and the file work of the trim (exists, size, sha256, move without
overwriting, unlink, write_text), so the trim's logic (fleetkit.trim.execute) is written once for
both implementations:

* `LocalBrokerFiles`: folders of this machine (access: local; the lab's brokers);
* `SshBrokerFiles`: the broker host's folders over SSH (access: ssh; fleetkit.clients.ssh): SFTP
  for listing, stat, reading, writing, renaming; `sha256sum` and `sync` run on the host for a
  file's checksum and the folders' fsync (argv quoted, never through a shell unquoted). A move
  there is always a rename on the host (the quarantine is on the log dir's file system:
  fleetkit.trim.layout.host_quarantine_root): never a copy, so a restore is byte for byte.
"""

from __future__ import annotations

import datetime as dt
import errno
import hashlib
import os
import posixpath
import re
import shutil
import stat as stat_
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fleetkit.core.errors import FleetError

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


class BrokerFilesError(FleetError):
    """A file operation on a broker's files failed or was refused (one line naming the files)."""


def _segments(log_dir: str, topic: str, partition: int, found: list[tuple[int, int, float]]) -> list[Segment]:
    """The segments of one partition folder from (base offset, size, mtime) of its .log files, in
    base-offset order; the last is the active one (local folders and SSH alike)."""
    found = sorted(found)
    return [Segment(log_dir, topic, partition, base, size, dt.datetime.fromtimestamp(mtime, dt.timezone.utc),
                    i == len(found) - 1) for i, (base, size, mtime) in enumerate(found)]


class BrokerFiles(Protocol):
    # what the collection reads
    def segments(self, topic: str, partition: int) -> list[Segment]: ...
    def cleaner_checkpoints(self) -> dict[tuple[str, str, int], int]: ...
    def partitions(self, topic: str) -> list[tuple[str, int]]: ...

    # the trim's file work (paths are the broker's own: absolute on its host)
    def exists(self, path: str) -> bool: ...
    def size(self, path: str) -> int | None: ...  # None: no such file
    def sha256(self, path: str) -> str: ...
    def move(self, src: str, dst: str, sha256: str) -> None: ...  # never overwrites; durable
    def unlink(self, path: str) -> None: ...  # durable
    def write_text(self, path: str, text: str) -> None: ...


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
            return _segments(d, topic, partition, found)
        return []

    def cleaner_checkpoints(self) -> dict[tuple[str, str, int], int]:
        out = {}
        for d in self.log_dirs:
            f = Path(d) / "cleaner-offset-checkpoint"
            if f.exists():
                for (topic, p), off in parse_checkpoint(f.read_text(), str(f)).items():
                    out[(d, topic, p)] = off
        return out

    # -- the trim's file work ---------------------------------------------------------------------
    def exists(self, path: str) -> bool:
        return os.path.lexists(path)

    def size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return None

    def sha256(self, path: str) -> str:
        return sha256_file(str(path))

    def move(self, src: str, dst: str, sha256: str) -> None:
        """Move one file without overwriting anything. Same filesystem: rename (atomic). Across
        filesystems: copy to a hidden .partial name, fsync, check the copy's SHA-256 against
        `sha256`, rename it into place, and only then unlink the source."""
        src_, dst_ = Path(src), Path(dst)
        dst_.parent.mkdir(parents=True, exist_ok=True)
        if dst_.exists():
            raise BrokerFilesError(f"refusing to overwrite {dst_}: it already exists")
        try:
            os.rename(src_, dst_)
            fsync_dir(dst_.parent)
            fsync_dir(src_.parent)
            return
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise BrokerFilesError(f"cannot move {src_} to {dst_}: {e.strerror or e}") from None
        tmp = dst_.with_name(f".{dst_.name}.partial")
        tmp.unlink(missing_ok=True)
        shutil.copyfile(src_, tmp)
        shutil.copystat(src_, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        copied = sha256_file(str(tmp))
        if copied != sha256:
            tmp.unlink()
            raise BrokerFilesError(f"the copy of {src_} to {dst_} has SHA-256 {copied}, the source {sha256}: copy "
                                   "removed, the source is untouched")
        os.rename(tmp, dst_)
        fsync_dir(dst_.parent)
        os.unlink(src_)
        fsync_dir(src_.parent)

    def unlink(self, path: str) -> None:
        os.unlink(path)
        fsync_dir(Path(path).parent)

    def write_text(self, path: str, text: str) -> None:
        Path(path).write_text(text)


def fsync_dir(folder) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SshBrokerFiles:
    """A broker's files on its host, over an SSH session (fleetkit.clients.ssh.SshSession): the
    same calls as LocalBrokerFiles. Listing, stat, reading and writing go through SFTP; the
    checksum is `sha256sum -- <path>` and the folders' fsync `sync -- <folder>...` on the host (argv
    quoted); a move is an SFTP rename, which never replaces an existing file, in a folder made
    first. A move the host cannot make as a rename (another file system) is refused: nothing is
    copied across file systems over SSH."""

    def __init__(self, session, log_dirs: list[str] | tuple[str, ...], broker_id: int | None = None):
        self.session = session
        self.log_dirs = [str(d) for d in log_dirs]
        self.broker_id = broker_id

    @property
    def where(self) -> str:
        b = f"broker {self.broker_id} " if self.broker_id is not None else ""
        return f"{b}on {self.session.settings.where}"

    def _sftp(self):
        return self.session.sftp()

    def _listdir_attr(self, folder: str):
        try:
            return self._sftp().listdir_attr(folder)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise BrokerFilesError(f"{self.where}: cannot list {folder}: {e.strerror or e}") from None

    def partitions(self, topic: str) -> list[tuple[str, int]]:
        out = []
        for d in self.log_dirs:
            for a in self._listdir_attr(d) or []:
                name = a.filename
                if stat_.S_ISDIR(a.st_mode or 0) and name.startswith(f"{topic}-") and name[len(topic) + 1:].isdigit():
                    out.append((d, int(name[len(topic) + 1:])))
        return sorted(out, key=lambda x: x[1])

    def segments(self, topic: str, partition: int) -> list[Segment]:
        for d in self.log_dirs:
            attrs = self._listdir_attr(posixpath.join(d, f"{topic}-{partition}"))
            if attrs is None:
                continue
            found = sorted((int(m.group(1)), a.st_size, a.st_mtime) for a in attrs
                           for m in [SEGMENT_RE.match(a.filename)] if m)
            return _segments(d, topic, partition, found)
        return []

    def cleaner_checkpoints(self) -> dict[tuple[str, str, int], int]:
        out = {}
        for d in self.log_dirs:
            f = posixpath.join(d, "cleaner-offset-checkpoint")
            try:
                with self._sftp().open(f, "r") as fh:
                    text = fh.read().decode()
            except FileNotFoundError:
                continue
            except OSError as e:
                raise BrokerFilesError(f"{self.where}: cannot read {f}: {e.strerror or e}") from None
            for (topic, p), off in parse_checkpoint(text, f).items():
                out[(d, topic, p)] = off
        return out

    # -- the trim's file work ---------------------------------------------------------------------
    def _stat(self, path: str):
        try:
            return self._sftp().lstat(path)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise BrokerFilesError(f"{self.where}: cannot stat {path}: {e.strerror or e}") from None

    def exists(self, path: str) -> bool:
        return self._stat(path) is not None

    def size(self, path: str) -> int | None:
        st = self._stat(path)
        return None if st is None else st.st_size

    def sha256(self, path: str) -> str:
        res = self.session.check(["sha256sum", "--", path], what=f"{self.where}: the checksum of {path}")
        line = res.text.lstrip("\\")  # sha256sum escapes a name holding a backslash or a newline
        digest = line[:64]
        if not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise BrokerFilesError(f"{self.where}: sha256sum of {path} answered {res.text[:80]!r}")
        return digest

    def _makedirs(self, folder: str) -> None:
        sftp = self._sftp()
        missing = []
        while folder not in ("", "/") and self._stat(folder) is None:
            missing.append(folder)
            folder = posixpath.dirname(folder)
        for f in reversed(missing):
            try:
                sftp.mkdir(f, mode=0o750)
            except OSError as e:
                if self._stat(f) is None:
                    raise BrokerFilesError(f"{self.where}: cannot create {f}: {e.strerror or e}") from None

    def _sync(self, *folders: str) -> None:
        self.session.check(["sync", "--", *folders], what=f"{self.where}: fsync of {', '.join(folders)}")

    def move(self, src: str, dst: str, sha256: str) -> None:
        """A rename on the host (SFTP rename never replaces an existing file), its folders fsynced.
        `sha256` is the source's checksum (a rename keeps the bytes: it is not read again)."""
        self._makedirs(posixpath.dirname(dst))
        if self.exists(dst):
            raise BrokerFilesError(f"refusing to overwrite {dst} {self.where}: it already exists")
        try:
            self._sftp().rename(src, dst)
        except OSError as e:
            raise BrokerFilesError(f"{self.where}: cannot rename {src} to {dst} ({e.strerror or e}): the "
                                   "quarantine must be on the log dir's file system (a rename; nothing is copied "
                                   "over SSH)") from None
        self._sync(posixpath.dirname(dst), posixpath.dirname(src))

    def unlink(self, path: str) -> None:
        try:
            self._sftp().remove(path)
        except OSError as e:
            raise BrokerFilesError(f"{self.where}: cannot remove {path}: {e.strerror or e}") from None
        self._sync(posixpath.dirname(path))

    def write_text(self, path: str, text: str) -> None:
        self._makedirs(posixpath.dirname(path))
        try:
            with self._sftp().open(path, "w") as fh:
                fh.write(text.encode())
        except OSError as e:
            raise BrokerFilesError(f"{self.where}: cannot write {path}: {e.strerror or e}") from None


def sha256_file(path: str, chunk: int = 4 * 1024 * 1024) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)
