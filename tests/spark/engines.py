"""Comparing a job's outputs from two engines (Spark and in process): values equal, floats within
a tolerance, rows matched by their key."""

from __future__ import annotations

import math


def close(a, b, abs_tol: float = 1e-6) -> bool:
    """Equal, floats within 1e-9 relative (abs_tol absolute), through dicts and lists."""
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=abs_tol)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], abs_tol) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, abs_tol) for x, y in zip(a, b))
    return a == b


def by_key(rows, keys) -> dict[tuple, dict]:
    """{the row's values of `keys`: the row}; a key twice fails the test."""
    out = {tuple(r[k] for k in keys): r for r in rows}
    assert len(out) == len(rows)
    return out
