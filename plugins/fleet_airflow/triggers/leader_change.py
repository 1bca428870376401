"""An event trigger: fires when a __consumer_offsets partition of a cluster changes leader.

Runs in the triggerer (no worker slot held while waiting), behind an AssetWatcher: each event
becomes an asset event, and the asset schedules the ownership check DAG. It waits on ZooKeeper
watches (fleetkit.ownership.watch), not by polling; a slow re-read every `reconcile_seconds` is only a
safety net for a watch lost in between.

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


class LeaderChangeTrigger(BaseEventTrigger):
    def __init__(self, cluster: str, fleet_file: str, reconcile_seconds: float = 60.0, debounce_seconds: float = 0.5):
        super().__init__()
        self.cluster = cluster
        self.fleet_file = fleet_file
        self.reconcile_seconds = float(reconcile_seconds)
        self.debounce_seconds = float(debounce_seconds)
        self.watch = None  # the running LeaderEpochWatch (tests reach its ZooKeeper session through it)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"cluster": self.cluster, "fleet_file": self.fleet_file,
                 "reconcile_seconds": self.reconcile_seconds, "debounce_seconds": self.debounce_seconds})

    def _zookeeper(self):
        from fleetkit.core.fleet import load_fleet

        from fleet_airflow.clusters import zookeeper_for

        cluster = load_fleet(self.fleet_file).cluster(self.cluster)
        zk = zookeeper_for(cluster)
        if zk is None:
            raise ValueError(f"cluster {self.cluster!r} in {self.fleet_file} has no zookeeper: leader changes of a "
                             "KRaft or metadata-only cluster cannot be watched (the scheduled check still runs)")
        return zk.persistent()

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
        from fleetkit.ownership.watch import LeaderEpochWatch, changes

        loop = asyncio.get_running_loop()
        wake: asyncio.Queue[str] = asyncio.Queue()

        def notify(reason: str) -> None:  # kazoo thread -> event loop
            loop.call_soon_threadsafe(wake.put_nowait, reason)

        zk = self._zookeeper()
        self.watch = watch = LeaderEpochWatch(zk, notify)
        await asyncio.to_thread(watch.start)
        try:
            current = await asyncio.to_thread(watch.snapshot)
            baseline = await self._load_baseline()
            if baseline is None:
                baseline = current
                await self._save_baseline(current)
            log.info("watching %d __consumer_offsets partition states of cluster %s (ZooKeeper %s%s)",
                     len(current), self.cluster, zk.hosts, zk.chroot)
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
