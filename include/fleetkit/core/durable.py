"""Durable file-system changes: a created, renamed or removed file survives a crash only once the
folder that names it is flushed too (the data's fsync does not cover the folder's entry)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush folder `path` (after creating, renaming or removing a file in it). A file system that
    cannot fsync a folder is skipped."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError:  # e.g. EINVAL where folders cannot be fsynced
        pass
    finally:
        os.close(fd)


def replace_file(path: str | os.PathLike, data: bytes) -> Path:
    """Write `data` as file `path`, whole or not at all: a hidden temporary file beside it, flushed,
    renamed over `path`, then the folder flushed (created with its parents if missing). A path on the
    data root's object store (a fleetkit.core.datasets.DataPath) is published whole as one object
    (DataRoot's rule); it has no folder to flush."""
    from fleetkit.core.datasets import DataPath

    if isinstance(path, DataPath) and not path.local:
        path.write_bytes(data)
        return path
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex}-{path.name}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
    return path
