"""MemoryStore: the embedded store for one replica (and for simulate-style runs of the service).

It keeps the same semantics as RedisStore (see base.py), so the service code never branches on
the store kind. The lease exists here too, with an injected monotonic clock, because the service
runs the same leader loop either way; with one process it is simply always won.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Claim, Conflict, Fenced, ReconcileReport, Record


class MemoryStore:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._holder: str | None = None
        self._lease_epoch = 0
        self._expires = 0.0
        self._epoch = 0
        self._records: dict[str, Record] = {}
        # (node, index) -> uid for whole GPUs; (node, index) -> {uid: share} for shared cards.
        self._owners: dict[tuple[str, int], str] = {}

    # ---- lease -----------------------------------------------------------------------------

    def _held_by(self, holder: str, epoch: int) -> bool:
        return (
            self._holder == holder and self._lease_epoch == epoch and self._clock() < self._expires
        )

    async def acquire(self, holder: str, ttl_ms: int) -> int | None:
        now = self._clock()
        if self._holder is not None and now < self._expires and self._holder != holder:
            return None
        if self._holder != holder or now >= self._expires:
            self._epoch += 1
            self._holder, self._lease_epoch = holder, self._epoch
        self._expires = now + ttl_ms / 1000
        return self._lease_epoch

    async def renew(self, holder: str, epoch: int, ttl_ms: int) -> bool:
        if not self._held_by(holder, epoch):
            return False
        self._expires = self._clock() + ttl_ms / 1000
        return True

    async def release_lease(self, holder: str, epoch: int) -> None:
        if self._held_by(holder, epoch):
            self._holder = None

    def _fence(self, holder: str, epoch: int) -> None:
        if not self._held_by(holder, epoch):
            raise Fenced(f"{holder} does not hold the lease at epoch {epoch}")

    # ---- claims ----------------------------------------------------------------------------

    async def reserve(self, holder: str, epoch: int, claims: list[Claim]) -> None:
        self._fence(holder, epoch)
        problem = self._check(claims)
        if problem:
            raise Conflict(problem)
        for claim in claims:
            self._drop(claim.uid)
            self._write(claim, "reserved", epoch)

    def _check(self, claims: list[Claim]) -> str | None:
        taken: dict[tuple[str, int], str] = {}
        shared: dict[tuple[str, int], list[tuple[str, int, int, int, str]]] = {}
        for uid, rec in self._records.items():
            for s in rec.claim.shares:
                shared.setdefault((rec.claim.node, s.index), []).append(
                    (uid, s.core, s.memory_mib, s.sgpu, s.qos)
                )
        for claim in claims:
            for index in claim.devices:
                key = (claim.node, index)
                owner = self._owners.get(key) or taken.get(key)
                if owner is not None and owner != claim.uid:
                    return f"GPU {index} on node {claim.node} is held by pod UID {owner}"
                if any(u != claim.uid for u, *_ in shared.get(key, [])):
                    return f"GPU {index} on node {claim.node} is shared by other pods"
                taken[key] = claim.uid
            for s in claim.shares:
                key = (claim.node, s.index)
                owner = self._owners.get(key) or taken.get(key)
                if owner is not None and owner != claim.uid:
                    return f"GPU {s.index} on node {claim.node} is held whole by pod UID {owner}"
                users = [u for u in shared.get(key, []) if u[0] != claim.uid]
                core = sum(u[1] for u in users) + s.core
                memory = sum(u[2] for u in users) + s.memory_mib
                sgpu = sum(u[3] for u in users) + s.sgpu
                qos = {u[4] for u in users if u[4]}
                if core > 100 or memory > s.cap_memory_mib or sgpu > s.cap_sgpu:
                    return f"GPU {s.index} on node {claim.node} has no room for the share"
                if s.qos and qos - {s.qos}:
                    return f"GPU {s.index} on node {claim.node} serves QoS {sorted(qos)[0]}"
                shared.setdefault(key, []).append((claim.uid, s.core, s.memory_mib, s.sgpu, s.qos))
        return None

    def _write(self, claim: Claim, state: str, epoch: int) -> None:
        self._records[claim.uid] = Record(claim, state, epoch)
        for index in claim.devices:
            self._owners[(claim.node, index)] = claim.uid

    def _drop(self, uid: str) -> None:
        rec = self._records.pop(uid, None)
        if rec is None:
            return
        for index in rec.claim.devices:
            if self._owners.get((rec.claim.node, index)) == uid:
                del self._owners[(rec.claim.node, index)]

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None:
        self._fence(holder, epoch)
        for uid in uids:
            rec = self._records.get(uid)
            if rec is not None:
                self._records[uid] = Record(rec.claim, "bound", epoch)

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        self._fence(holder, epoch)
        for uid in uids:
            self._drop(uid)

    async def reconcile(
        self, holder: str, epoch: int, truth: list[Claim], pending: list[str]
    ) -> ReconcileReport:
        self._fence(holder, epoch)
        known = {c.uid for c in truth}
        waiting = set(pending)
        freed = 0
        kept = 0
        for uid, rec in list(self._records.items()):
            if uid in known:
                continue
            if rec.state == "reserved" and (rec.epoch == epoch or uid in waiting):
                kept += 1  # a bind in flight, ours or a previous leader's
                continue
            self._drop(uid)
            freed += 1
        added = 0
        conflicts: list[str] = []
        for claim in truth:
            current = self._records.get(claim.uid)
            if current is not None and current.claim == claim and current.state == "bound":
                continue
            self._drop(claim.uid)
            problem = self._check([claim])
            if problem:
                conflicts.append(f"pod {claim.pod}: {problem}")
            self._write(claim, "bound", epoch)
            added += 1
        return ReconcileReport(added, freed, kept, tuple(conflicts))

    async def records(self) -> dict[str, Record]:
        return dict(self._records)

    async def close(self) -> None:
        return None
