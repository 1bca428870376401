"""Durable file-system changes: a created, renamed or removed file survives a crash only once the
folder that names it is flushed too (the data's fsync does not cover the folder's entry)."""

from __future__ import annotations

import os


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
