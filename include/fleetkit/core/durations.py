"""Durations as people write them: '90s', '15m', '2h', '1d' (or a number of seconds)."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

_DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration_seconds(text: Any) -> float:
    """'90s', '15m', '1h', '1d' or a number of seconds -> seconds. ValueError naming the text
    otherwise."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, (int, float)):
        return float(text)
    m = _DURATION_RE.match(str(text).strip().lower())
    if not m:
        raise ValueError(f"{text!r} is not a duration like 90s, 15m, 2h or 1d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_duration(text: Any) -> dt.timedelta:
    """The same as a timedelta."""
    return dt.timedelta(seconds=parse_duration_seconds(text))


def short_duration(seconds: float) -> str:
    """'45s', '7m 30s', '12 min', '2h 5m', '3d 4h': a duration as a person reads it."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    return f"{m} min" if not s or m >= 10 else f"{m}m {s}s"
