"""Executing a __consumer_offsets trim: preconditions re-checked, segment files quarantined with
checksums (and restored), brokers stopped and started one by one, offsets re-committed.

Nothing is deleted: segment files (.log, .index, .timeindex) are moved into a quarantine folder
(<quarantine>/<run>/broker-<id>/__consumer_offsets-<p>/) with a manifest of their SHA-256; restore
moves them back. The broker must be stopped while its files move. Every step is journaled
(fleetkit.core.journal: intent before, outcome after, fsync), each file move with its source,
destination, size and SHA-256, so `run` picks up an interrupted execution where it stopped
(`fleetctl trim resume`), `teardown` starts any broker left stopped, and `restore` puts the
files back byte for byte. Broker control is an interface: `CommandBrokerControl` runs the
commands of the cluster's `broker_control` in the fleet file (the lab's point at its fleetctl);
clusters without one get the rendered shell runbook for their own tooling.

Every file operation goes through the broker's `BrokerFiles` (fleetkit.clients.broker_files), got
from the run's `ClusterContext.broker_hosts` per broker: this machine's folders (access: local) or
the broker host's over SSH (access: ssh, where the quarantine is a folder beside the log dir on
that host and every move a rename there: fleetkit.trim.layout.host_quarantine_root). The logic
below is the same for both.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import sys
import time
from pathlib import Path
from typing import Callable

from fleetkit.core.action import ClusterContext
from fleetkit.core.errors import ClusterUnreachable, FleetError
from fleetkit.core.journal import Journal, read_journal
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.clients.broker_control import control_for, stop_problems
from fleetkit.clients import offsets_leaders
from fleetkit.clients.broker_files import BrokerFiles, BrokerFilesError, LocalBrokerFiles
from fleetkit.clients.broker_hosts import local_hosts
from fleetkit.trim import rules
from fleetkit.trim.cleaner import fix_mode
from fleetkit.trim.layout import FILE_ORDER, kraft, quarantine_folder
from fleetkit.trim.verify import all_groups, offsets_from_json, offsets_json, read_offsets_when_loaded

log = logging.getLogger(__name__)


class TrimError(FleetError):
    pass


#: a broker's files by its id (BrokerHosts.files); the default: this machine's
FilesFor = Callable[[int], BrokerFiles]


def _local(broker: int) -> BrokerFiles:
    return LocalBrokerFiles(())


def files_for(ctx: ClusterContext) -> FilesFor:
    """The run's broker files: ctx.broker_hosts (this machine or SSH, per the fleet file), else
    this machine's (a broker with access: ssh is then refused in one line)."""
    hosts = getattr(ctx, "broker_hosts", None) or local_hosts(ctx.cluster)
    return hosts.files


def check_segments(log_dir: str, partition: int, segments: list[dict], files: BrokerFiles | None = None) -> list[str]:
    """Preconditions: every planned segment still exists with the planned size."""
    files = files or _local(-1)
    problems = []
    for s in segments:
        f = posixpath.join(str(log_dir), f"{OFFSETS_TOPIC}-{partition}", f"{s['base_offset']:020d}.log")
        size = files.size(f)
        if size is None:
            problems.append(f"{f} no longer exists")
        elif size != s["size_bytes"]:
            problems.append(f"{f} changed size since the plan: {s['size_bytes']} -> {size}")
    return problems


# -- moving files into and out of the quarantine ------------------------------------------------
def file_moves(plan: dict) -> list[dict]:
    """Every file move the plan can make, numbered (`seq`) in execution order: broker by broker
    (the plan's order), partition by partition, segment by segment (oldest first), each segment's
    files in FILE_ORDER. A file that does not exist when its turn comes (.timeindex before 0.10.1)
    is skipped."""
    d = plan["details"]
    out = []
    for b in d["order"]:
        for pre in plan["preconditions"][0]["segments"]:
            if pre["broker"] != b:
                continue
            src_dir = Path(pre["log_dir"]) / f"{OFFSETS_TOPIC}-{int(pre['partition'])}"
            # a broker reached over SSH: its quarantine beside its log dir on its host (the plan says)
            dst_dir = quarantine_folder(pre.get("quarantine_root") or d["quarantine_root"], plan["run_id"], b,
                                        pre["partition"])
            for s in sorted(pre["segments"], key=lambda s: s["base_offset"]):
                for suffix in d.get("file_suffixes") or FILE_ORDER:
                    name = f"{int(s['base_offset']):020d}{suffix}"
                    out.append({"seq": len(out), "step": "move", "broker": b, "partition": pre["partition"],
                                "base_offset": s["base_offset"], "source": str(src_dir / name),
                                "destination": str(dst_dir / name)})
    return out


def move_verified(src, dst, sha256: str, files: BrokerFiles | None = None) -> None:
    """Move one file without overwriting anything (BrokerFiles.move: a rename, or on this machine
    across file systems a copy checked against `sha256` before the source goes)."""
    try:
        (files or _local(-1)).move(str(src), str(dst), sha256)
    except BrokerFilesError as e:
        raise TrimError(str(e)) from None


def _checksum_problem(path, entry: dict, files: BrokerFiles | None = None) -> str | None:
    files = files or _local(-1)
    if not files.exists(str(path)):
        return f"{path} is missing"
    got = files.sha256(str(path))
    if got != entry.get("sha256"):
        return f"{path} has SHA-256 {got}, the journal recorded {entry.get('sha256')}"
    return None


def settle(m: dict, entry: dict | None, files: BrokerFiles | None = None) -> str:
    """Where move `m` stands from its journal entry and the files on disk:
    `done` (in the quarantine), `pending` (in the log dir, nothing of it in the quarantine),
    `absent` (neither: the file never existed), `copied` (a cross-filesystem move killed after the
    verified copy was in place and before the source was unlinked: both exist), `restored`."""
    files = files or _local(-1)
    src, dst = m["source"], m["destination"]
    src_there, dst_there = files.exists(src), files.exists(dst)
    status = (entry or {}).get("status")
    if status == "restored":
        return "restored"
    if status in ("done", "intent"):
        if dst_there and not src_there:
            return "done"
        if dst_there and src_there:
            if status == "done":
                raise TrimError(f"{src} is back in the log dir while the journal says it was quarantined at {dst} "
                                "(did the broker rebuild it?); move it aside by hand, then resume")
            return "copied"
        if src_there:
            return "pending"
        raise TrimError(f"{src} is neither in the log dir nor in the quarantine ({dst}), and the journal says "
                        f"it was being moved ({status}): check the quarantine folder and the journal")
    if dst_there:
        if not src_there:
            raise TrimError(f"{dst} is in the quarantine but the journal has no record of moving it there")
        raise TrimError(f"{dst} already exists in the quarantine (not from this run's journal): refusing to overwrite")
    return "pending" if src_there else "absent"


def apply_move(journal: Journal, m: dict, entry: dict | None, files: BrokerFiles | None = None) -> str:
    """Make move `m` (journaled: intent with source, destination, size, sha256; then the outcome)
    unless the journal and the disk say it is already made. Returns moved / already / absent."""
    files = files or _local(-1)
    state = settle(m, entry, files)
    src, dst = m["source"], m["destination"]
    if state == "restored":
        raise TrimError(f"{dst} was restored by `fleetctl trim restore`: this run was rolled back; plan again")
    if state == "done":  # moved earlier (a resumed run): the quarantined copy must match its checksum
        problem = _checksum_problem(dst, entry, files)
        if problem:
            raise TrimError(problem)
        if entry.get("status") != "done":  # killed between the rename and the outcome
            journal.outcome(m["seq"], "done", settled=True)
        return "already"
    if state == "copied":
        problem = _checksum_problem(dst, entry, files)
        if problem:
            raise TrimError(f"{problem}; the source {src} is still in place")
        files.unlink(src)
        journal.outcome(m["seq"], "done", settled=True)
        return "moved"
    if state == "absent":
        return "absent"
    size = files.size(src)
    digest = files.sha256(src)
    # a move cut short stays an open intent: settle() finds where its file is
    journal.step(m["seq"], lambda: move_verified(src, dst, digest, files), failures=(),
                 **{k: m[k] for k in ("step", "broker", "partition", "base_offset", "source", "destination")},
                 size=size, sha256=digest)
    log.info("quarantined %s -> %s (%d bytes, sha256 %s)", src, dst, size, digest[:16])
    return "moved"


def write_manifests(plan: dict, entries: dict, files_for: FilesFor = _local) -> list[dict]:
    """manifest.json in each quarantine folder: the files moved there and their SHA-256."""
    by_folder: dict[Path, dict] = {}
    for m in file_moves(plan):
        e = entries.get(m["seq"]) or {}
        if e.get("status") != "done":
            continue
        folder = Path(m["destination"]).parent
        man = by_folder.setdefault(folder, {"log_dir": str(Path(m["source"]).parent.parent), "broker": m["broker"],
                                            "partition": m["partition"], "files": []})
        man["files"].append({"source": m["source"], "quarantined": m["destination"], "sha256": e.get("sha256"),
                             "size": e.get("size")})
    for folder, man in by_folder.items():
        files_for(man["broker"]).write_text(str(folder / "manifest.json"), json.dumps(man, indent=1))
    return list(by_folder.values())


def pause_hook(moved: int) -> None:
    """Test hook: with FLEET_TRIM_PAUSE_AFTER_MOVES=N in the environment, execute stops (sleeps
    for ever, broker stopped) after its N-th file move, so a test can kill it between two moves.
    Never set it outside tests."""
    n = os.environ.get("FLEET_TRIM_PAUSE_AFTER_MOVES")
    if n and n.isdigit() and moved == int(n):
        print(f"FLEET_TRIM_PAUSE_AFTER_MOVES: paused after {moved} file move(s)", file=sys.stderr, flush=True)
        while True:
            time.sleep(3600)


# -- live state the preconditions and the execution read -------------------------------------------
def offsets_topic_state(ctx: ClusterContext) -> tuple[dict[int, int], dict[int, list[int]]]:
    """Leader and ISR of every __consumer_offsets partition (ZooKeeper, else metadata)."""
    return offsets_leaders.leaders_and_isr(ctx.kafka, ctx.zk)


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


def broker_partitions(plan: dict, broker: int) -> set[int]:
    return {pre["partition"] for pre in plan["preconditions"][0]["segments"] if pre["broker"] == broker}


def wait_back_in_isr(ctx: ClusterContext, broker: int, partitions: set[int], timeout: float = 180) -> None:
    """After broker_control.start: the broker registered again and in the ISR of `partitions`."""
    deadline = time.monotonic() + timeout
    while True:
        isr: dict = {}
        if broker in registered_brokers(ctx):
            _, isr = offsets_topic_state(ctx)
            if all(broker in isr.get(p, []) for p in partitions):
                return
        if time.monotonic() > deadline:
            raise TrimError(f"broker {broker} is not back in the ISR of {OFFSETS_TOPIC} partition(s) "
                            f"{sorted(partitions)} {timeout:.0f} s after it was started (ISR {isr}); stopping here: "
                            "the remaining brokers are untouched (finish with `fleetctl trim resume`)")
        time.sleep(1)


def group_states(ctx: ClusterContext, groups: list[str]) -> dict[str, str]:
    return {g: d.state if not d.members else "HasMembers:" + d.state
            for g, d in ctx.kafka.describe_groups(groups).items()} if groups else {}


def _journal_entries(ctx: ClusterContext) -> dict:
    return read_journal(ctx.journal_path) if ctx.journal_path else {}


def _control(ctx: ClusterContext):
    control = control_for(ctx.cluster, getattr(ctx, "broker_hosts", None))
    if control is None:
        raise TrimError(f"cluster {ctx.cluster.name!r} has no broker_control in the fleet file: this runbook stops and "
                        "starts brokers only through it; run the rendered runbook-broker-N.sh on each broker instead")
    return control


# -- preconditions ---------------------------------------------------------------------------------
def check(plan: dict, isr_now: dict[int, list[int]], recommit_states: dict[str, str],
          entries: dict | None = None, files_for: FilesFor = _local) -> list[str]:
    """The preconditions that do not hold. With a journal's `entries` (a resumed run): only the
    segments still to move and the brokers still to handle are checked."""
    entries = entries or {}
    finished = {b for b in plan["details"]["order"] if (entries.get(f"broker {b}") or {}).get("status") == "done"}
    moved_logs = {(m["broker"], m["partition"], m["base_offset"]) for m in (file_moves(plan) if entries else [])
                  if m["source"].endswith(".log") and (entries.get(m["seq"]) or {}).get("status") in ("done", "intent")}
    problems = []
    for s in plan["preconditions"][0]["segments"]:
        if s["broker"] in finished:
            continue
        todo = [seg for seg in s["segments"] if (s["broker"], s["partition"], seg["base_offset"]) not in moved_logs]
        problems += check_segments(s["log_dir"], s["partition"], todo, files_for(s["broker"]))
    for s in plan["preconditions"][0]["segments"]:
        if s["broker"] not in finished and s["broker"] not in isr_now.get(s["partition"], []):
            problems.append(f"broker {s['broker']} is not in the ISR of {OFFSETS_TOPIC}-{s['partition']} "
                            f"(ISR now {isr_now.get(s['partition'])})")
    for p in plan["details"]["trim_plan"]["partitions"]:
        for c in p["recommit"]:
            state = recommit_states.get(c["group"])
            if not rules.may_recommit(state):
                problems.append(f"group {c['group']!r} is {state} now: re-committing its offset could overwrite "
                                "a newer one; re-plan")
    return problems


def preconditions(ctx: ClusterContext, plan: dict) -> list[str]:
    """The approved plan's preconditions that no longer hold on the cluster now (for a resumed
    run, those of what is left to do); on KRaft, also that the controller quorum keeps a
    majority while each node is stopped."""
    recommit_groups = sorted({c["group"] for p in plan["details"]["trim_plan"]["partitions"] for c in p["recommit"]})
    _, isr = offsets_topic_state(ctx)
    problems = check(plan, isr, group_states(ctx, recommit_groups), _journal_entries(ctx), files_for(ctx))
    if kraft(ctx.cluster):
        problems += stop_problems(ctx.kafka, plan["details"]["order"])
    return problems


# -- re-commits that never rewind (the decision: rules.recommit_decision) ----------------------
def _recommit(ctx: ClusterContext, journal: Journal, entries: dict, plan: dict, before: dict) -> tuple[list, list]:
    """Put back the planned offsets that were only in quarantined segments, group by group: per
    group one state read, one read of its committed offsets and one commit of what is decided (a
    partition's tens of thousands of keys took a client start per key). The window in which a
    standalone consumer's commit can be overwritten stays one round trip (Kafka has no conditional
    commit); the journal's intents are durable before the commit, its outcomes after."""
    recommitted, skipped = [], []
    todo: dict[str, list[tuple[str, dict]]] = {}
    for p in plan["details"]["trim_plan"]["partitions"]:
        for c in p["recommit"]:
            seq = f"recommit {json.dumps([c['group'], c['topic'], c['partition']], ensure_ascii=False)}"
            e = entries.get(seq) or {}
            if e.get("status") == "done":
                recommitted.append(c)
            elif e.get("status") == "skipped":
                skipped.append({**c, "reason": e.get("reason")})
            else:
                todo.setdefault(c["group"], []).append((seq, c))
    for group, items in todo.items():
        state = group_states(ctx, [group]).get(group)
        now_all = ctx.kafka.group_offsets(group, [(c["topic"], c["partition"]) for _, c in items])
        b = before.get(group)
        outcomes, intents, to_commit, metadata, committing = [], [], {}, {}, []
        for seq, c in items:
            tp = (c["topic"], c["partition"])
            now = now_all.get(tp)
            decision, why = rules.recommit_decision(c["offset"], b.get(tp) if isinstance(b, dict) else None, now, state)
            if decision == "skip":
                outcomes.append({"seq": seq, "status": "skipped", "group": group, "topic": c["topic"],
                                 "partition": c["partition"], "planned": c["offset"], "now": now, "reason": why})
                log.warning("re-commit of group %r %s-%s skipped: %s", group, c["topic"], c["partition"], why)
                skipped.append({**c, "now": now, "reason": why})
            elif decision == "commit":
                intents.append({"seq": seq, "status": "intent", "step": "recommit", "group": group, "topic": c["topic"],
                                "partition": c["partition"], "offset": c["offset"], "before": now})
                to_commit[tp] = c["offset"]
                metadata[tp], left_out = rules.recommit_metadata(c.get("metadata"))
                if left_out:
                    why = f"{why}; {left_out}"
                    log.warning("re-commit of group %r %s-%s: %s", group, c["topic"], c["partition"], left_out)
                committing.append((seq, c, why))
            else:
                outcomes.append({"seq": seq, "status": "done", "note": why})
                recommitted.append(c)
        if to_commit:
            journal.write(intents)
            ctx.kafka.commit_offsets(group, to_commit, retry_for=300, metadata=metadata)
            outcomes += [{"seq": seq, "status": "done", "note": why} for seq, _, why in committing]
            recommitted += [c for _, c, _ in committing]
        if outcomes:
            journal.write(outcomes)
    return recommitted, skipped


# -- execution -------------------------------------------------------------------------------------
def run(ctx: ClusterContext, plan: dict) -> dict:
    """Apply the cleaner fix (live with IncrementalAlterConfigs from Kafka 1.1; through the
    fleet file's set_config, picked up by the restart, before), then per broker (followers first): stop, quarantine, start, wait for
    the ISR; then re-commit the offsets of groups without members. Journaled step by step: run
    again with the same journal (a resumed run), it skips what is done, checks every file already
    in the quarantine against its checksum and finishes the rest."""
    control = _control(ctx)
    files = files_for(ctx)
    if not ctx.journal_path:
        raise TrimError("a trim executes only with a journal (ClusterContext.journal_path): it is what resume, "
                        "teardown and restore read")
    d = plan["details"]
    groups = all_groups(plan)
    entries = _journal_entries(ctx)
    if any(e.get("status") == "restored" for e in entries.values()):
        raise TrimError("the journal shows files restored by `fleetctl trim restore`: this run was rolled back; "
                        "plan a new trim")
    journal = Journal(ctx.journal_path)
    try:
        if (entries.get("before") or {}).get("status") == "read":
            before = offsets_from_json(entries["before"]["offsets"])
            inactive = list(entries["before"]["inactive"])
        else:
            before, _ = read_offsets_when_loaded(ctx, groups)
            inactive = sorted(g for g, s in group_states(ctx, groups).items() if rules.may_recommit(s))
            journal.write([{"seq": "before", "status": "read", "offsets": offsets_json(before), "inactive": inactive}])
        for b, fix in sorted(d["cleaner_fix"].items()):
            fix = {k: v for k, v in fix.items() if k != "apply"}  # the settings only (apply: for the runbook)
            seq = f"cleaner fix broker {b}"
            if (entries.get(seq) or {}).get("status") != "done":
                if fix_mode(ctx.cluster.version_tuple) == "live":  # Kafka 1.1+: no restart needed
                    from fleetkit.trim import cleaner_config

                    journal.step(seq, lambda: {"before": cleaner_config.apply_live(ctx.kafka, fix, [int(b)])["before"]},
                                 failures=(), step="alter_config_live", broker=int(b), config=fix)
                else:
                    journal.step(seq, lambda: control.set_config(int(b), fix) and None, failures=(),
                                 step="set_config", broker=int(b), config=fix)
        moves = file_moves(plan)
        timings: dict[str, float] = {}
        counts = {"moved": 0, "already": 0, "absent": 0}
        ctx.advanced(0, len(d["order"]), "brokers")
        for i, b in enumerate(d["order"], 1):
            mine = [m for m in moves if m["broker"] == b]
            seq = f"broker {b}"
            if (entries.get(seq) or {}).get("status") == "done":
                for m in mine:  # a resumed run: what was quarantined must still match its checksum
                    counts[apply_move(journal, m, entries.get(m["seq"]), files(b))] += 1
                ctx.advanced(i, len(d["order"]), "brokers")
                continue
            journal.intent(seq, step="stop, quarantine, start", broker=b)
            t0 = time.monotonic()
            if b in registered_brokers(ctx):
                control.stop(b)
            wait_broker_gone(ctx, b)
            timings[f"broker {b} stop"] = round(time.monotonic() - t0, 1)
            for m in mine:
                done = apply_move(journal, m, entries.get(m["seq"]), files(b))
                counts[done] += 1
                if done == "moved":
                    pause_hook(counts["moved"])
            write_manifests(plan, read_journal(ctx.journal_path), files)
            t0 = time.monotonic()
            control.start(b)
            ctx.kafka.close()  # a fresh admin client: librdkafka's may keep stale state across the restart
            timings[f"broker {b} start"] = round(time.monotonic() - t0, 1)
            t0 = time.monotonic()
            wait_back_in_isr(ctx, b, broker_partitions(plan, b))
            timings[f"broker {b} back in ISR"] = round(time.monotonic() - t0, 1)
            journal.outcome(seq, "done")
            log.info("trim: broker %d done (%d of %d): %d file(s) quarantined so far", b, i, len(d["order"]),
                     counts["moved"])
            ctx.advanced(i, len(d["order"]), "brokers")
        offs_now, load_wait = read_offsets_when_loaded(ctx, groups)
        timings["coordinator load"] = round(load_wait, 1)
        recommitted, skipped = _recommit(ctx, journal, entries, plan, before)
    finally:
        journal.close()
    return {"before": offsets_json(before), "inactive": inactive, "order": d["order"], "timings": timings,
            "files": counts, "journal": str(ctx.journal_path) if ctx.journal_path else None,
            "recommitted": recommitted, "recommit_skipped": skipped,
            "coordinator_load_wait_seconds": round(load_wait, 1),
            "offsets_missing_before_recommit": sum(1 for g in inactive if isinstance(before.get(g), dict)
                                                   for tp, o in before[g].items() if not isinstance(offs_now.get(g), str)
                                                   and (offs_now.get(g) or {}).get(tp) is None and o is not None)}


def progress(plan: dict, entries: dict, files_for: FilesFor = _local) -> dict:
    """What the journal says of a run: file moves per state, brokers finished, re-commits made."""
    states: dict[str, list[dict]] = {}
    for m in file_moves(plan):
        try:
            st = settle(m, entries.get(m["seq"]), files_for(m["broker"]))
        except TrimError as e:
            st = "inconsistent"
            m = {**m, "problem": str(e)}
        states.setdefault(st, []).append(m)
    recommits = [c for p in plan["details"]["trim_plan"]["partitions"] for c in p["recommit"]]
    return {"moves": states,
            "brokers_done": [b for b in plan["details"]["order"]
                             if (entries.get(f"broker {b}") or {}).get("status") == "done"],
            "brokers_started": [b for b in plan["details"]["order"]
                                if (entries.get(f"broker {b}") or {}).get("status") == "intent"],
            "recommits_done": sum(1 for k, e in entries.items() if str(k).startswith("recommit ")
                                  and e.get("status") in ("done", "skipped")),
            "recommits": len(recommits),
            "restored": any(e.get("status") == "restored" for e in entries.values())}


# -- teardown: never leave a broker stopped ------------------------------------------------------
def _segments_of(moves: list[dict]) -> dict[tuple, list[dict]]:
    segs: dict[tuple, list[dict]] = {}
    for m in moves:
        segs.setdefault((m["broker"], m["partition"], m["base_offset"]), []).append(m)
    return segs


def _repair_segment(journal: Journal, entries: dict, files: list[dict], bfiles: BrokerFiles | None = None) -> list[str]:
    """A segment whose .log is still in the log dir gets back those of its index files that are
    already in the quarantine (checksummed, journaled). `bfiles`: the broker's files."""
    bfiles = bfiles or _local(-1)
    log_move = files[-1]
    if settle(log_move, entries.get(log_move["seq"]), bfiles) not in ("pending", "copied"):
        return []  # the .log is in the quarantine (its index files went first): the segment moved whole
    did = []
    for m in files[:-1]:
        e = entries.get(m["seq"])
        if settle(m, e, bfiles) != "done":
            continue
        problem = _checksum_problem(m["destination"], e, bfiles)
        if problem:
            raise TrimError(f"cannot put {m['source']} back: {problem}")
        back = f"{m['seq']} back"
        journal.step(back, lambda: move_verified(m["destination"], m["source"], e["sha256"], bfiles), failures=(),
                     step="move back", source=m["destination"], destination=m["source"], sha256=e["sha256"],
                     size=e.get("size"))
        journal.outcome(m["seq"], "moved_back")
        did.append(f"moved {m['source']} back from the quarantine (its segment's .log had not moved)")
    return did


def teardown(ctx: ClusterContext, plan: dict) -> list[str]:
    """Whatever happened to execute: start every broker of the plan that is not running. Before a
    stopped broker starts, a segment whose move was cut short (its index files in the quarantine,
    its .log still in the log dir) gets those files back (checksummed, journaled), so the broker
    never sees a segment without its index. Returns what it did."""
    control = control_for(ctx.cluster, getattr(ctx, "broker_hosts", None))
    if control is None:
        return []
    broker_files = files_for(ctx)
    did: list[str] = []
    entries = _journal_entries(ctx)
    running = registered_brokers(ctx)
    journal = Journal(ctx.journal_path)
    errors = []
    try:
        for (b, p, base), files in _segments_of(file_moves(plan)).items():
            if b in running:
                continue
            try:
                did += _repair_segment(journal, entries, files, broker_files(b))
            except (FleetError, OSError) as e:  # the broker starts anyway: Kafka rebuilds a missing index
                errors.append(f"broker {b} {OFFSETS_TOPIC}-{p} segment {base}: {e}")
        for b in plan["details"]["order"]:
            if b in running:
                continue
            def start(b=b) -> None:
                control.start(b)
                ctx.kafka.close()
                wait_back_in_isr(ctx, b, broker_partitions(plan, b))

            try:  # every broker gets its start, whatever happens to the others
                journal.step(f"teardown start broker {b}", start, failures=(FleetError,),
                             on_error=lambda e: {"error": str(e)}, step="start", broker=b)
                did.append(f"started broker {b} (it was not running) and it is back in the ISR")
            except FleetError as e:
                errors.append(f"broker {b}: {e}")
        if errors:
            raise TrimError("teardown finished with problems: " + "; ".join(errors) +
                            (f" (done: {'; '.join(did)})" if did else ""))
    finally:
        journal.close()
    return did


# -- restore: the quarantined files back, byte for byte -----------------------------------------
def restorable(plan: dict, entries: dict, files_for: FilesFor = _local) -> tuple[list[dict], list[str]]:
    """The moves whose file is in the quarantine (with its journal entry), and the problems that
    stop a restore: a quarantined file that does not match its checksum, or a file of the same
    name back in the log dir."""
    out, problems = [], []
    for m in file_moves(plan):
        e = entries.get(m["seq"])
        files = files_for(m["broker"])
        try:
            st = settle(m, e, files)
        except TrimError as err:
            problems.append(str(err))
            continue
        if st in ("done", "copied"):
            if st == "copied":
                problems.append(f"{m['source']} and its copy {m['destination']} both exist (an interrupted move): "
                                "resume or move it by hand first")
                continue
            problem = _checksum_problem(m["destination"], e, files)
            if problem:
                problems.append(problem)
            out.append({**m, "sha256": e["sha256"], "size": e.get("size")})
    return out, problems


def restore_files(journal: Journal, moves: list[dict], files: BrokerFiles) -> list[str]:
    """Move one stopped broker's quarantined files (restorable's, in the order given) back where
    they were, journaled; what it did, one line per file."""
    did = []
    for m in moves:
        seq = f"{m['seq']} restore"
        journal.step(seq, lambda: move_verified(m["destination"], m["source"], m["sha256"], files), failures=(),
                     step="restore", source=m["destination"], destination=m["source"], sha256=m["sha256"],
                     size=m["size"])
        journal.outcome(m["seq"], "restored")
        did.append(f"restored {m['source']} ({m['size']} bytes, sha256 {m['sha256'][:16]})")
    return did


def restore(ctx: ClusterContext, plan: dict) -> list[str]:
    """Move every quarantined file of the run back where it was (broker by broker: stop, move
    back with checksums, start, wait for the ISR). Refuses before touching anything when a file
    does not match its checksum."""
    control = _control(ctx)
    broker_files = files_for(ctx)
    entries = _journal_entries(ctx)
    files, problems = restorable(plan, entries, broker_files)
    if problems:
        raise TrimError("not restoring anything: " + "; ".join(problems))
    did = []
    journal = Journal(ctx.journal_path)
    order = plan["details"]["order"]
    try:
        ctx.advanced(0, len(order), "brokers")
        for i, b in enumerate(order, 1):
            # newest segment first, each one's .log before its index files: stopped halfway, the log
            # dir never holds an index without its .log (Kafka would delete it)
            mine = [m for m in reversed(files) if m["broker"] == b]
            if not mine:
                ctx.advanced(i, len(order), "brokers")
                continue
            if b in registered_brokers(ctx):
                control.stop(b)
            wait_broker_gone(ctx, b)
            did += restore_files(journal, mine, broker_files(b))
            control.start(b)
            ctx.kafka.close()
            wait_back_in_isr(ctx, b, broker_partitions(plan, b))
            did.append(f"broker {b} started and back in the ISR")
            log.info("trim restore: broker %d done (%d of %d)", b, i, len(order))
            ctx.advanced(i, len(order), "brokers")
    finally:
        journal.close()
    return did
