"""The correctness proof of group-id reconciliation: a numbered table of cases, each with why its
answer is right. tests/unit runs it through fleetkit.group_ids.rules.diff on each cluster's rows,
tests/spark through the Spark job's classify (rules.diff on slices of the rows, the unknown groups
given from outside the slice); both must give every case's classes exactly.

A case: (number, title, members [(group, client_host, client_id)], znodes {name: (group, age s)},
expected {path-or-"member:<client_id>": class}, why). Grace is 3600 s everywhere.
"""

from __future__ import annotations

import datetime as dt

GRACE = 3600.0
ROOT = "/client_group_id"
AS_OF = dt.datetime(2026, 2, 1, 12, 0, tzinfo=dt.timezone.utc)
HOSTILE_GROUP = "g'\"; rm -rf / #`x` $(y) | ünï 🧨 a/b"

CASES = [
    (1, "live member, znode holds its group", [("g1", "10.0.0.7", "c1")], {"10.0.0.7-c1": ("g1", 10)},
     {"10.0.0.7-c1": "OK"}, "the mapping is what KoP would write"),
    (2, "live member, no znode", [("g1", "10.0.0.7", "c1")], {},
     {"10.0.0.7-c1": "MISSING"}, "a broker restart closed the connection and KoP deleted the znode"),
    (3, "live member, znode holds another group", [("g1", "10.0.0.7", "c1")], {"10.0.0.7-c1": ("g0", 10)},
     {"10.0.0.7-c1": "MISMATCHED"}, "a delete raced a newer write; the coordinator's member list is the truth"),
    (4, "no member, old znode", [], {"10.0.0.7-c1": ("g1", 7200)},
     {"10.0.0.7-c1": "STALE"}, "the client is long gone and nobody touched the znode for 2 h > grace"),
    (5, "no member, young znode", [], {"10.0.0.7-c1": ("g1", 60)},
     {"10.0.0.7-c1": "OK"}, "within the grace period: the client may be joining right now"),
    (6, "one ip-clientId in two groups, with a znode", [("g1", "10.0.0.7", "c1"), ("g2", "10.0.0.7", "c1")],
     {"10.0.0.7-c1": ("g1", 10)}, {"10.0.0.7-c1": "CONFLICT"}, "KoP's path cannot tell them apart: never guess"),
    (7, "one ip-clientId in two groups, no znode", [("g1", "10.0.0.7", "c1"), ("g2", "10.0.0.7", "c1")], {},
     {"10.0.0.7-c1": "CONFLICT"}, "CONFLICT wins over MISSING (first match)"),
    (8, "conflict on an old znode", [("g1", "10.0.0.7", "c1"), ("g2", "10.0.0.7", "c1")],
     {"10.0.0.7-c1": ("g9", 99999)}, {"10.0.0.7-c1": "CONFLICT"}, "CONFLICT wins over MISMATCHED and STALE"),
    (9, "two members of one group with the same ip-clientId", [("g1", "10.0.0.7", "c1"), ("g1", "10.0.0.7", "c1")],
     {}, {"10.0.0.7-c1": "MISSING"}, "same group: one mapping serves both, no conflict"),
    (10, "same client id on two hosts", [("g1", "10.0.0.7", "c1"), ("g2", "10.0.0.8", "c1")],
     {"10.0.0.7-c1": ("g1", 10)}, {"10.0.0.7-c1": "OK", "10.0.0.8-c1": "MISSING"}, "the path holds the IP"),
    (11, "client id with a slash", [("g1", "10.0.0.7", "a/b")], {},
     {"member:a/b": "UNREPRESENTABLE"}, "'/' makes KoP nest the znode below the root: report, never write a wrong path"),
    (12, "client id outside the BMP", [("g1", "10.0.0.7", "x🧨")], {},
     {"member:x🧨": "UNREPRESENTABLE"}, "ZooKeeper refuses surrogate code units in a path"),
    (13, "hostile but representable names", [(HOSTILE_GROUP, "10.0.0.7", "c 'x'; $(rm) ünï")], {},
     {"10.0.0.7-c 'x'; $(rm) ünï": "MISSING"}, "quotes, spaces, shell characters and BMP unicode are fine in ZooKeeper"),
    (14, "hostile group already mapped", [(HOSTILE_GROUP, "10.0.0.7", "c2")], {"10.0.0.7-c2": (HOSTILE_GROUP, 5)},
     {"10.0.0.7-c2": "OK"}, "data compared byte for byte"),
    (15, "znode name without '-'", [], {"garbage": ("g1", 99999)}, {"garbage": "STALE"},
     "not a KoP name at all, no member matches it, old: STALE (deleted only behind approval)"),
    (16, "member without host", [("g1", "", "c1")], {}, {"member:c1": "UNREPRESENTABLE"},
     "no IP, no path"),
    (18, "old znode of a group that could not be described", [("gx", None, None), ("g1", "10.0.0.7", "c2")],
     {"10.0.0.7-c1": ("gx", 99999), "10.0.0.7-c2": ("g1", 5)}, {"10.0.0.7-c1": "OK", "10.0.0.7-c2": "OK"},
     "its coordinator was loading: its members are unknown, so its mappings are not stale"),
    (19, "partial group listing (a broker did not answer ListGroups)",
     [(None, None, None), ("g1", "10.0.0.7", "c2")],
     {"10.0.0.7-c1": ("gy", 99999), "10.0.0.7-c2": ("g1", 5), "10.0.0.7-c3": ("g1", 99999)},
     {"10.0.0.7-c1": "OK", "10.0.0.7-c2": "OK", "10.0.0.7-c3": "OK"},
     "the groups the silent broker coordinates were not listed: any client may be a member of one, so "
     "no mapping of the cluster is stale, not even one of a group that was listed"),
    (17, "znode exactly at the grace", [], {"10.0.0.7-c1": ("g1", 3600)}, {"10.0.0.7-c1": "OK"},
     "STALE needs longer than the grace period"),
]


def rows(number: int, members, znodes) -> tuple[list[dict], list[dict]]:
    cluster = f"case-{number:02d}"
    mem = [{"cluster": cluster, "observed_at": AS_OF, "group": g, "client_host": h, "client_id": c,
            "member_id": None if h is None and c is None else f"{c}-{i}"} for i, (g, h, c) in enumerate(members)]
    zn = [{"cluster": cluster, "observed_at": AS_OF, "path": f"{ROOT}/{name}", "client_host": name.partition("-")[0],
           "client_id": name.partition("-")[2], "group": g, "znode_version": 3,
           "ctime": AS_OF - dt.timedelta(seconds=age + 100), "mtime": AS_OF - dt.timedelta(seconds=age)}
          for name, (g, age) in znodes.items()]
    return zn, mem


def key(f: dict) -> str:
    return f["path"].rsplit("/", 1)[-1] if f["path"] else f"member:{f['client_id']}"
