"""Executing a __consumer_offsets trim: preconditions re-checked, segment files quarantined with
checksums (and restored), brokers stopped and started one by one, offsets re-committed.

Nothing is deleted: segment files (.log, .index, .timeindex) are moved into a quarantine folder
with a manifest of their SHA-256 before and after; rollback moves them back. The broker must be
stopped while its files move. Broker control is an interface: `CommandBrokerControl` runs the
commands of the cluster's `broker_control` in the fleet file (the lab's point at its fleetctl);
clusters without one get the rendered shell runbook for their own tooling.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

from fleetkit.core.action import ClusterContext
from fleetkit.core.errors import ClusterUnreachable, FleetError
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.clients.broker_control import control_for
from fleetkit.clients import offsets_leaders
from fleetkit.clients.broker_files import SEGMENT_SUFFIXES, sha256_file
from fleetkit.trim.verify import all_groups, offsets_json, read_offsets_when_loaded

log = logging.getLogger(__name__)


class TrimError(FleetError):
    pass


def segment_files(log_dir: str, partition: int, base_offset: int) -> list[Path]:
    folder = Path(log_dir) / f"{OFFSETS_TOPIC}-{partition}"
    return [folder / f"{base_offset:020d}{s}" for s in SEGMENT_SUFFIXES if (folder / f"{base_offset:020d}{s}").exists()]


def check_segments(log_dir: str, partition: int, segments: list[dict]) -> list[str]:
    """Preconditions: every planned segment still exists with the planned size."""
    problems = []
    for s in segments:
        f = Path(log_dir) / f"{OFFSETS_TOPIC}-{partition}" / f"{s['base_offset']:020d}.log"
        if not f.exists():
            problems.append(f"{f} no longer exists")
        elif f.stat().st_size != s["size_bytes"]:
            problems.append(f"{f} changed size since the plan: {s['size_bytes']} -> {f.stat().st_size}")
    return problems


def _move(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.exists():
        raise TrimError(f"refusing to overwrite {dst} in the quarantine")
    try:
        os.rename(src, dst)
    except OSError:
        shutil.copy2(src, dst)
        with open(dst, "rb") as f:
            os.fsync(f.fileno())
        os.unlink(src)


def quarantine(log_dir: str, partition: int, segments: list[dict], quarantine_dir: str | Path,
               label: str) -> dict:
    """Move the segments' files to quarantine_dir/label/, checksummed; returns the manifest (also
    written next to the files as manifest.json)."""
    dest = Path(quarantine_dir) / label
    entries = []
    for s in segments:
        for src in segment_files(log_dir, partition, s["base_offset"]):
            digest = sha256_file(str(src))
            size = src.stat().st_size
            dst = dest / src.name
            _move(src, dst)
            after = sha256_file(str(dst))
            if after != digest:
                raise TrimError(f"checksum of {dst} differs after the move ({digest} -> {after}); moving it back")
            entries.append({"source": str(src), "quarantined": str(dst), "sha256": digest, "size": size})
            log.info("quarantined %s -> %s (%d bytes, sha256 %s)", src, dst, size, digest[:16])
    manifest = {"log_dir": log_dir, "partition": partition, "files": entries,
                "moved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def restore(manifest: dict) -> list[str]:
    """Move quarantined files back where they were (checksums verified). The broker must be stopped."""
    restored = []
    for e in manifest["files"]:
        src, dst = Path(e["quarantined"]), Path(e["source"])
        if sha256_file(str(src)) != e["sha256"]:
            raise TrimError(f"{src} does not match its recorded checksum; not restoring it")
        _move(src, dst)
        restored.append(str(dst))
    return restored


# -- live state the preconditions and the execution read -------------------------------------------
def offsets_topic_state(ctx: ClusterContext) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Leader and ISR of every __consumer_offsets partition (ZooKeeper, else metadata)."""
    states = offsets_leaders.offsets_topic_state(ctx.kafka, ctx.zk)
    return {p: s.leader for p, s in states.items()}, {p: list(s.isr) for p, s in states.items()}


def registered_brokers(ctx: ClusterContext) -> set[int]:
    """The brokers the cluster knows alive now (ZooKeeper's /brokers/ids, else metadata; none when
    no broker answers)."""
    if ctx.zk is not None:
        return set(ctx.zk.broker_ids())
    try:
        return set(ctx.kafka.metadata().brokers)
    except ClusterUnreachable:
        return set()


def wait_broker_gone(ctx: ClusterContext, broker_id: int, timeout: float = 60) -> None:
    """After broker_control.stop: the broker must be down before any of its files move (a stop
    command aimed at the wrong place can succeed without stopping it)."""
    deadline = time.monotonic() + timeout
    while broker_id in registered_brokers(ctx):
        if time.monotonic() > deadline:
            raise TrimError(f"broker {broker_id} is still registered {timeout:.0f} s after broker_control.stop "
                            "returned: none of its files moved; check the cluster's broker_control in the fleet file")
        time.sleep(1)


def group_states(ctx: ClusterContext, groups: list[str]) -> dict[str, str]:
    return {g: d.state if not d.members else "HasMembers:" + d.state
            for g, d in ctx.kafka.describe_groups(groups).items()} if groups else {}


# -- preconditions ---------------------------------------------------------------------------------
def check(plan: dict, isr_now: dict[int, list[int]], recommit_states: dict[str, str]) -> list[str]:
    problems = []
    for s in plan["preconditions"][0]["segments"]:
        problems += check_segments(s["log_dir"], s["partition"], s["segments"])
    for s in plan["preconditions"][0]["segments"]:
        if s["broker"] not in isr_now.get(s["partition"], []):
            problems.append(f"broker {s['broker']} is not in the ISR of {OFFSETS_TOPIC}-{s['partition']} "
                            f"(ISR now {isr_now.get(s['partition'])})")
    for p in plan["details"]["trim_plan"]["partitions"]:
        for c in p["recommit"]:
            state = recommit_states.get(c["group"])
            if state not in ("Empty", "Dead"):
                problems.append(f"group {c['group']!r} is {state} now: re-committing its offset could overwrite "
                                "a newer one; re-plan")
    return problems


def preconditions(ctx: ClusterContext, plan: dict) -> list[str]:
    """The approved plan's preconditions that no longer hold on the cluster now."""
    recommit_groups = sorted({c["group"] for p in plan["details"]["trim_plan"]["partitions"] for c in p["recommit"]})
    _, isr = offsets_topic_state(ctx)
    return check(plan, isr, group_states(ctx, recommit_groups))


# -- execution -------------------------------------------------------------------------------------
def run(ctx: ClusterContext, plan: dict) -> dict:
    """Apply the cleaner fix, then per broker (followers first): stop, quarantine, start, wait for
    the ISR; then re-commit the offsets of groups without members."""
    control = control_for(ctx.cluster)
    if control is None:
        raise TrimError(f"cluster {ctx.cluster.name!r} has no broker_control in the fleet file: this runbook stops and "
                        "starts brokers only through it; run the rendered runbook-broker-N.sh on each broker instead")
    d = plan["details"]
    groups = all_groups(plan)
    before, _ = read_offsets_when_loaded(ctx, groups)
    inactive = sorted(g for g, s in group_states(ctx, groups).items() if s in ("Empty", "Dead"))
    for b, fix in sorted(d["cleaner_fix"].items()):
        control.set_config(int(b), fix)
    manifests = []
    timings = {}
    for b in d["order"]:
        t0 = time.monotonic()
        control.stop(b)
        wait_broker_gone(ctx, b)
        timings[f"broker {b} stop"] = round(time.monotonic() - t0, 1)
        for pre in plan["preconditions"][0]["segments"]:
            if pre["broker"] == b:
                label = f"{ctx.cluster.name}/broker-{b}/{OFFSETS_TOPIC}-{pre['partition']}/{plan['run_id']}"
                manifests.append(quarantine(pre["log_dir"], pre["partition"], pre["segments"],
                                            d["quarantine_root"], label.replace(":", "_").replace("+", "_")))
        t0 = time.monotonic()
        control.start(b)
        ctx.kafka.close()  # a fresh admin client: librdkafka's may keep stale state across the restart
        timings[f"broker {b} start"] = round(time.monotonic() - t0, 1)
        t0 = time.monotonic()
        deadline = time.monotonic() + 180
        parts = {pre["partition"] for pre in plan["preconditions"][0]["segments"] if pre["broker"] == b}
        while True:
            _, isr = offsets_topic_state(ctx)
            if all(b in isr.get(p, []) for p in parts):
                break
            if time.monotonic() > deadline:
                raise TrimError(f"broker {b} is not back in the ISR of {sorted(parts)} after 180 s (ISR {isr}); "
                                "stopping here: the remaining brokers are untouched")
            time.sleep(1)
        timings[f"broker {b} back in ISR"] = round(time.monotonic() - t0, 1)
    offs_now, load_wait = read_offsets_when_loaded(ctx, groups)
    timings["coordinator load"] = round(load_wait, 1)
    recommitted = []
    for p in d["trim_plan"]["partitions"]:
        for c in p["recommit"]:
            if c["group"] in inactive:
                ctx.kafka.commit_offsets(c["group"], {(c["topic"], c["partition"]): c["offset"]}, retry_for=300)
                recommitted.append(c)
    return {"before": offsets_json(before), "inactive": inactive, "manifests": manifests, "order": d["order"],
            "timings": timings,
            "recommitted": recommitted, "coordinator_load_wait_seconds": round(load_wait, 1),
            "offsets_missing_before_recommit": sum(1 for g in inactive for tp, o in
                                                   (before.get(g) or {}).items() if not isinstance(offs_now.get(g), str)
                                                   and (offs_now.get(g) or {}).get(tp) is None and o is not None)}
