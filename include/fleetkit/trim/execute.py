"""Executing a __consumer_offsets trim: quarantine segment files with checksums, roll back,
control brokers, re-commit and verify offsets.

Nothing is deleted: segment files (.log, .index, .timeindex) are moved into a quarantine folder
with a manifest of their SHA-256 before and after; rollback moves them back. The broker must be
stopped while its files move. Broker control is an interface: `LabBrokerControl` drives the lab
fleet; other clusters get the rendered shell runbook for their own tooling.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.errors import FleetError
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.clients.broker_files import SEGMENT_SUFFIXES, sha256_file

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


class BrokerControl(Protocol):
    def stop(self, broker_id: int) -> None: ...
    def start(self, broker_id: int) -> None: ...
    def set_config(self, broker_id: int, props: dict) -> None: ...


@dataclass
class LabBrokerControl:
    """Stops, starts and reconfigures brokers of a lab fleet (fleetlab.lab)."""

    lab_dir: str

    def _lab(self):
        from fleetlab.lab import Lab, LabSpec

        return Lab(LabSpec.load(self.lab_dir))

    def stop(self, broker_id: int) -> None:
        log.info("lab: stopping broker %d: %s", broker_id, self._lab().stop_broker(broker_id))

    def start(self, broker_id: int) -> None:
        self._lab().start_broker(broker_id)
        log.info("lab: broker %d answers again", broker_id)

    def set_config(self, broker_id: int, props: dict) -> None:
        from fleetlab.lab import LabSpec

        spec = LabSpec.load(self.lab_dir)
        spec.broker_overrides = {**spec.broker_overrides, **{k: str(v) for k, v in props.items()}}
        spec.save()
        from fleetlab.lab import Lab

        Lab(spec)._write_configs()
        log.info("lab: broker %d config %s (applies at the next start)", broker_id, props)


def lab_control_for(log_dirs: list[str]) -> LabBrokerControl | None:
    """The lab a broker belongs to (its log dir is <lab>/broker-N/data), or None."""
    for d in log_dirs:
        lab_dir = Path(d).resolve().parents[1]
        if (lab_dir / "lab.json").exists():
            return LabBrokerControl(str(lab_dir))
    return None


# -- the runbook: trim plan -> gate plan, execute, verify ----------------------------------------
ACTION = "trim_offsets_segments"


def gate_plan(cluster, trim_plan: dict, leaders: dict[int, int], isr: dict[int, list[int]],
              quarantine_root: str) -> dict:
    """The approval-gate plan for one cluster's trim plan (from spark_jobs/trim_plan.py)."""
    changes, seg_pre, brokers = [], [], set()
    fixes: dict[int, dict] = {}
    for p in trim_plan["partitions"]:
        for r in p["replicas"]:
            if not r["quarantine"]:
                continue
            brokers.add(r["broker"])
            for s in r["quarantine"]:
                changes.append({"target": f"broker {r['broker']} {OFFSETS_TOPIC}-{p['partition']} segment "
                                          f"{s['base_offset']:020d}",
                                "before": f"{s['size_bytes']} bytes in {r['log_dir']}", "after": "quarantine"})
            seg_pre.append({"broker": r["broker"], "log_dir": r["log_dir"], "partition": p["partition"],
                            "segments": r["quarantine"]})
            if r.get("fix") and "log.cleaner.dedupe.buffer.size" in r["fix"]:
                cur = fixes.get(r["broker"], {}).get("log.cleaner.dedupe.buffer.size", 0)
                fixes[r["broker"]] = {"log.cleaner.dedupe.buffer.size":
                                      max(cur, int(r["fix"]["log.cleaner.dedupe.buffer.size"]))}
        for c in p["recommit"]:
            changes.append({"target": f"group {c['group']} {c['topic']}-{c['partition']}",
                            "before": f"offset {c['offset']} only in a removed segment",
                            "after": f"re-committed {c['offset']}"})
    for b, fix in sorted(fixes.items()):
        changes.append({"target": f"broker {b} log.cleaner.dedupe.buffer.size",
                        "before": str(cluster.cleaner.dedupe_buffer_size),
                        "after": str(fix["log.cleaner.dedupe.buffer.size"])})
    parts = [p["partition"] for p in trim_plan["partitions"]]
    part_leaders = {p: leaders.get(p) for p in parts}
    order = sorted(brokers, key=lambda b: (b in part_leaders.values(), b))  # followers first, leaders last
    groups = sorted({c["group"] for p in trim_plan["partitions"] for c in p["recommit"] + p["active_groups"]})
    bytes_freed = sum(r["bytes_freed"] for p in trim_plan["partitions"] for r in p["replicas"])
    active = [c for p in trim_plan["partitions"] for c in p["active_groups"]]
    metadata_lost = [g for p in trim_plan["partitions"] for g in p["group_metadata_lost"]]
    from fleetkit.core.datasets import iso_z, utcnow

    return {
        "action": ACTION, "cluster": cluster.name, "created_at": iso_z(utcnow()),
        "title": f"Trim {len(changes)} change(s) on {OFFSETS_TOPIC} partition(s) {', '.join(map(str, parts))} "
                 f"(frees {bytes_freed:,} bytes)",
        "preconditions": [
            {"check": "segments_unchanged", "what": "every segment to quarantine still exists with its planned size",
             "segments": seg_pre},
            {"check": "brokers_in_isr", "what": f"brokers {order} are in the ISR of the trimmed partitions",
             "isr": {str(k): v for k, v in isr.items() if k in parts}},
        ],
        "changes": changes,
        "risks": [
            "Each broker is stopped while its files move: its partitions lose a replica meanwhile (followers "
            "first, the current leader last, so the new leader never has to load an untrimmed log).",
            f"{len(active)} offset(s) of groups with live members lie only in removed segments; they are NOT "
            "re-committed (the group would overwrite them): listed below for the operator.",
            f"{len(metadata_lost)} group(s) lose their group metadata record and will rebalance.",
        ],
        "rollback": {"how": "Stop the broker, move the quarantined files back (manifest.json in each quarantine "
                            f"folder under {quarantine_root}, checksums recorded), start it.",
                     "dag_id": None, "conf": None},
        "evidence": [{"label": f"partition {p['partition']} broker {r['broker']}", "value": f"{r['verdict']}: "
                      f"{r['reason']}"} for p in trim_plan["partitions"] for r in p["replicas"] if r.get("verdict")],
        "details": {"trim_plan": trim_plan, "order": order, "cleaner_fix": {str(k): v for k, v in fixes.items()},
                    "groups": groups, "active_offsets": active, "group_metadata_lost": metadata_lost,
                    "quarantine_root": quarantine_root, "bytes_freed": bytes_freed},
    }


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


def compare_offsets(before: dict, after: dict, inactive: set[str]) -> list[str]:
    """Every group's offsets after the trim vs before: equal for groups without live members; for
    active groups no offset may vanish or go back."""
    problems = []
    for g, offs in before.items():
        if isinstance(offs, str):
            continue
        now = after.get(g)
        if isinstance(now, str) or now is None:
            problems.append(f"group {g!r}: offsets not readable after the trim ({now})")
            continue
        for tp, off in offs.items():
            if off is None:
                continue
            got = now.get(tp)
            if g in inactive and got != off:
                problems.append(f"group {g!r} {tp[0]}-{tp[1]}: {off} before the trim, {got} after")
            elif g not in inactive and (got is None or got < off):
                problems.append(f"group {g!r} {tp[0]}-{tp[1]}: {off} before the trim, {got} after")
    return problems
