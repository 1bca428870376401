"""An event trigger: fires when a __consumer_offsets partition of a cluster changes leader.

Runs in the triggerer (no worker slot held while waiting), behind an AssetWatcher: each event
becomes an asset event, and the asset schedules the ownership check DAG.

* ZooKeeper-mode clusters (a `zookeeper` section in the fleet file): it waits on ZooKeeper watches
  (fleetkit.ownership.watch.LeaderEpochWatch), not by polling; a slow re-read every
  `reconcile_seconds` is only a safety net for a watch lost in between.
* Clusters without ZooKeeper (KRaft): nothing to watch, so it polls the leader epochs of
  __consumer_offsets with a Metadata request (v7+, fleetkit.ownership.watch.MetadataEpochPoll)
  every `poll_seconds` (never more often than every 2 s), each read in a thread so the
  triggerer's event loop never blocks.

Both give the same events (cluster, observed_at, changes, sessions) after the same debounce.

The epochs it last reported are kept in the asset's state store when the triggerer provides one,
so a change made while the triggerer was down (or the trigger restarted) fires as soon as it is
back. A lost ZooKeeper session is re-established by the client and then everything is re-read, so
a change made while the session was gone fires too.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

log = logging.getLogger(__name__)

STATE_KEY = "leader_epochs"
#: the shortest Metadata poll interval of a cluster without ZooKeeper
MIN_POLL_SECONDS = 2.0


class LeaderChangeTrigger(BaseEventTrigger):
    def __init__(self, cluster: str, fleet_file: str, reconcile_seconds: float = 60.0, debounce_seconds: float = 0.5,
                 poll_seconds: float = MIN_POLL_SECONDS):
        super().__init__()
        self.cluster = cluster
        self.fleet_file = fleet_file
        self.reconcile_seconds = float(reconcile_seconds)
        self.debounce_seconds = float(debounce_seconds)
        self.poll_seconds = max(MIN_POLL_SECONDS, float(poll_seconds))
        self.watch = None  # the running LeaderEpochWatch / MetadataEpochPoll (tests reach its session through it)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"cluster": self.cluster, "fleet_file": self.fleet_file,
                 "reconcile_seconds": self.reconcile_seconds, "debounce_seconds": self.debounce_seconds,
                 "poll_seconds": self.poll_seconds})

    def _watch(self, notify):
        """(the watch, a description for the log, whether it must be polled) for the cluster."""
        from fleetkit.core.fleet import load_fleet
        from fleetkit.ownership.watch import LeaderEpochWatch, MetadataEpochPoll

        from fleet_airflow.clusters import kafka_for, zookeeper_for

        cluster = load_fleet(self.fleet_file).cluster(self.cluster)
        zk = zookeeper_for(cluster)
        if zk is None:
            kafka = kafka_for(cluster)
            return (MetadataEpochPoll(kafka), f"Metadata polled every {self.poll_seconds:g}s from {kafka.bootstrap}",
                    True)
        zk = zk.persistent()
        return LeaderEpochWatch(zk, notify), f"ZooKeeper {zk.hosts}{zk.chroot}", False

    async def _load_baseline(self) -> dict | None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return None
        try:
            saved = await store.aget(STATE_KEY)
        except Exception as e:  # noqa: BLE001 - no store: start from what ZooKeeper says now
            log.warning("could not read the asset state store (%s); starting from the current epochs", e)
            return None
        return {int(p): v for p, v in saved.items()} if isinstance(saved, dict) else None

    async def _save_baseline(self, snap: dict) -> None:
        store = getattr(self, "asset_state_store", None)
        if store is None:
            return
        try:
            await store.aset(STATE_KEY, {str(p): v for p, v in snap.items()})
        except Exception as e:  # noqa: BLE001 - losing the baseline only means no catch-up after a restart
            log.warning("could not write the asset state store: %s", e)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from fleetkit.ownership.watch import changes

        loop = asyncio.get_running_loop()
        wake: asyncio.Queue[str] = asyncio.Queue()

        def notify(reason: str) -> None:  # kazoo thread -> event loop
            loop.call_soon_threadsafe(wake.put_nowait, reason)

        watch, how, polled = self._watch(notify)
        self.watch = watch
        await asyncio.to_thread(watch.start)
        try:
            current = await asyncio.to_thread(watch.snapshot)
            baseline = await self._load_baseline()
            if baseline is None:
                baseline = current
                await self._save_baseline(current)
            log.info("watching %d __consumer_offsets partition states of cluster %s (%s)",
                     len(current), self.cluster, how)
            while True:
                found = changes(baseline, current)
                if found:
                    payload = {"cluster": self.cluster, "observed_at": dt.datetime.now(dt.timezone.utc).isoformat(),
                               "changes": found, "sessions": watch.sessions}
                    log.warning("cluster %s: leader change on __consumer_offsets partition(s) %s",
                                self.cluster, ", ".join(str(c["partition"]) for c in found))
                    baseline = current
                    await self._save_baseline(current)
                    yield TriggerEvent(payload)
                if polled:
                    current = await self._poll(watch, baseline)
                    continue
                try:
                    reason = await asyncio.wait_for(wake.get(), timeout=self.reconcile_seconds)
                    await asyncio.sleep(self.debounce_seconds)  # one broker stop moves many partitions at once
                    while not wake.empty():
                        wake.get_nowait()
                    log.debug("cluster %s: woken by %s", self.cluster, reason)
                except asyncio.TimeoutError:
                    pass
                try:
                    current = await asyncio.to_thread(watch.snapshot)
                except Exception as e:  # noqa: BLE001 - connection gone: kazoo reconnects, we re-read then
                    log.warning("cluster %s: reading partition states failed (%s); retrying when the session "
                                "is back", self.cluster, e)
        finally:
            await asyncio.to_thread(watch.stop)

    async def _poll(self, watch, baseline: dict) -> dict:
        """Poll Metadata every poll_seconds until the leaders differ from `baseline`; then wait the
        debounce and read once more (a broker stop moves many partitions within moments)."""
        from fleetkit.ownership.watch import changes

        failures = 0
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                current = await asyncio.to_thread(watch.snapshot)
            except Exception as e:  # noqa: BLE001 - brokers unreachable: keep polling, log now and then
                failures += 1
                if failures == 1 or failures % 30 == 0:
                    log.warning("cluster %s: polling __consumer_offsets leaders failed %d time(s): %s",
                                self.cluster, failures, e)
                continue
            if failures:
                log.warning("cluster %s: metadata answers again after %d failed poll(s)", self.cluster, failures)
                failures = 0
            if not changes(baseline, current):
                continue
            await asyncio.sleep(self.debounce_seconds)
            try:
                return await asyncio.to_thread(watch.snapshot)
            except Exception:  # noqa: BLE001 - the change seen is reported; the next poll re-reads
                return current
