"""Znode paths built from hostile names: each name stays one component below its parent."""

from __future__ import annotations


class UnsafeZnodeName(ValueError):
    """A name that cannot be one znode path component."""


def child_path(parent: str, *names: str) -> str:
    """parent/name/... with each name checked to stay one component below its parent."""
    path = parent.rstrip("/") or ""
    for name in names:
        name = str(name)
        if name in ("", ".", "..") or "/" in name or "\x00" in name:
            raise UnsafeZnodeName(f"{name!r} cannot be a znode name below {path or '/'!r} "
                                  "(empty, '.', '..', or holds '/' or NUL)")
        path = f"{path}/{name}"
    return path
