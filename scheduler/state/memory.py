"""MemoryStore: the embedded store for one replica (and for simulate-style runs of the service).

It keeps the same semantics as RedisStore (see base.py), so the service code never branches on
the store kind. The lease exists here too, with an injected monotonic clock, because the service
runs the same leader loop either way; with one process it is simply always won.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import (
    Claim,
    Fenced,
    GangRecord,
    History,
    Nomination,
    Owner,
    ReconcileReport,
    Record,
    ReservesUnits,
    ShareClaim,
)


class MemoryStore(ReservesUnits):
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._holder: str | None = None
        self._lease_epoch = 0
        self._expires = 0.0
        self._epoch = 0
        self._records: dict[str, Record] = {}
        # (node, index) -> owner of a whole GPU.
        self._owners: dict[tuple[str, int], Owner] = {}
        # (node, index) -> the UIDs whose claims on that whole GPU a later claim was written
        # over (an election reconcile writing two bound claims on it): the owner's successors
        # when it is released, if their records still name the GPU (redis_store.py's
        # P:contested).
        self._contested: dict[tuple[str, int], list[str]] = {}
        # (node, index) -> pod UID -> that pod's shares of the card, kept by _write and _drop:
        # a reservation reads only the cards its claims touch, never every record.
        self._cards: dict[tuple[str, int], dict[str, list[ShareClaim]]] = {}
        self._members: dict[str, set[str]] = {}  # gang -> member UIDs
        self._gangs: dict[str, GangRecord] = {}
        self._nodes: dict[str, str] = {}
        self._nominations: dict[str, Nomination] = {}  # preemptor UID -> its nomination
        self._last_election = ""  # holder|epoch that kept_history recorded last
        self._settled = ""  # holder|epoch that mark_settled marked last

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

    async def kept_history(self, holder: str, epoch: int) -> History:
        # One process, nothing to lose; but the first epoch has no history behind it to keep.
        self._fence(holder, epoch)
        previous, self._last_election = self._last_election, f"{holder}|{epoch}"
        return History(epoch > 1, previous, bool(previous) and self._settled == previous)

    async def mark_settled(self, holder: str, epoch: int) -> None:
        self._fence(holder, epoch)
        self._settled = f"{holder}|{epoch}"

    def _fence(self, holder: str, epoch: int) -> None:
        if not self._held_by(holder, epoch):
            raise Fenced(f"{holder} does not hold the lease at epoch {epoch}")

    # ---- claims ----------------------------------------------------------------------------

    async def reserve_each(
        self, holder: str, epoch: int, units: list[list[Claim]]
    ) -> list[str | None]:
        self._fence(holder, epoch)
        touched: set[str] = set()
        out: list[str | None] = []
        for claims in units:
            problem = self._check(claims)
            out.append(problem)
            if problem:
                continue
            # Drop every earlier claim of the unit's pods before writing: a gang decided afresh
            # may swap its members' GPUs, so one's new claim may name another's old GPUs. (The
            # second drop only meets a claim of the same pod written just before.)
            for claim in claims:
                self._drop(claim.uid, touched)
            for claim in claims:
                self._drop(claim.uid, touched)
                self._write(claim, "reserved", epoch, touched)
        self._settle(touched, epoch)
        return out

    def _check(self, claims: list[Claim]) -> str | None:
        """Why ``claims`` cannot be written next to what the store holds (and the earlier
        claims of the same list); None when they can. Reads only the GPUs the claims name.
        What the store holds for the list's own pods does not count: their records are
        replaced by the new claims (a gang decided afresh may swap its members' GPUs)."""
        mine = {claim.uid for claim in claims}
        taken: dict[tuple[str, int], str] = {}
        # Shares of the earlier claims of this list: (node, index) -> (uid, core, mem, sgpu, qos).
        added: dict[tuple[str, int], list[tuple[str, int, int, int, str]]] = {}
        for claim in claims:
            for index in claim.devices:
                key = (claim.node, index)
                owner = self._foreign_owner(key, mine) or taken.get(key)
                if owner is not None and owner != claim.uid:
                    return f"GPU {index} on node {claim.node} is held by pod UID {owner}"
                if any(u not in mine for u in self._cards.get(key, ())) or any(
                    u != claim.uid for u, *_ in added.get(key, [])
                ):
                    return f"GPU {index} on node {claim.node} is shared by other pods"
                taken[key] = claim.uid
            for s in claim.shares:
                key = (claim.node, s.index)
                owner = self._foreign_owner(key, mine) or taken.get(key)
                if owner is not None and owner != claim.uid:
                    return f"GPU {s.index} on node {claim.node} is held whole by pod UID {owner}"
                users = [
                    (u.core, u.memory_mib, u.sgpu, u.qos)
                    for uid, held in self._cards.get(key, {}).items()
                    if uid not in mine
                    for u in held
                ]
                users += [
                    (c, m, g, q) for uid, c, m, g, q in added.get(key, []) if uid != claim.uid
                ]
                core = sum(u[0] for u in users) + s.core
                memory = sum(u[1] for u in users) + s.memory_mib
                sgpu = sum(u[2] for u in users) + s.sgpu
                qos = {u[3] for u in users if u[3]}
                if core > 100 or memory > s.cap_memory_mib or sgpu > s.cap_sgpu:
                    return f"GPU {s.index} on node {claim.node} has no room for the share"
                if s.qos and qos - {s.qos}:
                    return f"GPU {s.index} on node {claim.node} serves QoS {sorted(qos)[0]}"
                added.setdefault(key, []).append((claim.uid, s.core, s.memory_mib, s.sgpu, s.qos))
        return None

    def _foreign_owner(self, key: tuple[str, int], mine: set[str]) -> str | None:
        """The UID owning GPU ``key`` in the store unless it is one of ``mine``."""
        owner = self._owner_uid(key)
        return None if owner in mine else owner

    def _owner_uid(self, key: tuple[str, int]) -> str | None:
        owner = self._owners.get(key)
        return None if owner is None else owner.uid

    def _write(self, claim: Claim, state: str, epoch: int, touched: set[str]) -> None:
        self._records[claim.uid] = Record(claim, state, epoch)
        for index in claim.devices:
            key = (claim.node, index)
            before = self._owner_uid(key)
            if before is not None and before != claim.uid:
                self._contested.setdefault(key, []).append(before)
            self._owners[key] = Owner(claim.uid, claim.gang, epoch)
        for s in claim.shares:
            self._cards.setdefault((claim.node, s.index), {}).setdefault(claim.uid, []).append(s)
        if claim.gang:
            self._members.setdefault(claim.gang, set()).add(claim.uid)
            touched.add(claim.gang)

    def _drop(self, uid: str, touched: set[str]) -> None:
        rec = self._records.pop(uid, None)
        if rec is None:
            return
        for index in rec.claim.devices:
            key = (rec.claim.node, index)
            if self._owner_uid(key) == uid:
                del self._owners[key]
                self._succeed(key)
        for s in rec.claim.shares:
            key = (rec.claim.node, s.index)
            card = self._cards.get(key)
            if card is not None:
                card.pop(uid, None)
                if not card:
                    del self._cards[key]
        if rec.claim.gang:
            self._members.get(rec.claim.gang, set()).discard(uid)
            touched.add(rec.claim.gang)

    def _succeed(self, key: tuple[str, int]) -> None:
        """GPU ``key``'s owner was released: the GPU goes to the latest claim written over on
        it whose record still names it (a release removes only the ownership its record
        holds, never another record's claim)."""
        waiting = self._contested.pop(key, [])
        while waiting:
            rec = self._records.get(waiting.pop())
            if rec is not None and rec.claim.node == key[0] and key[1] in rec.claim.devices:
                self._owners[key] = Owner(rec.claim.uid, rec.claim.gang, rec.epoch)
                if waiting:
                    self._contested[key] = waiting
                return

    def _settle(self, gangs: set[str], epoch: int) -> None:
        """Rewrite the records of these gangs from their members (see base.py)."""
        for gang in gangs:
            members = self._members.get(gang)
            if not members:
                self._members.pop(gang, None)
                self._gangs.pop(gang, None)
                continue
            records = [self._records[uid] for uid in members]
            replicas = max(r.claim.replicas for r in records)
            if any(r.state != "bound" for r in records):
                state = "reserved"
            elif len(records) < replicas:
                state = "partial"
            else:
                state = "bound"
            self._gangs[gang] = GangRecord(state, epoch, tuple(sorted(members)), replicas)

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None:
        self._fence(holder, epoch)
        touched: set[str] = set()
        for uid in uids:
            rec = self._records.get(uid)
            if rec is not None:
                self._records[uid] = Record(rec.claim, "bound", epoch)
                if rec.claim.gang:
                    touched.add(rec.claim.gang)
        self._settle(touched, epoch)

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        self._fence(holder, epoch)
        touched: set[str] = set()
        for uid in uids:
            self._drop(uid, touched)
        self._settle(touched, epoch)

    async def update_nodes(
        self, holder: str, epoch: int, put: dict[str, str], drop: list[str]
    ) -> None:
        self._fence(holder, epoch)
        self._nodes.update(put)
        for name in drop:
            self._nodes.pop(name, None)

    async def reconcile(
        self,
        holder: str,
        epoch: int,
        truth: list[Claim],
        pending: list[str],
        nodes: dict[str, str] | None = None,
    ) -> ReconcileReport:
        self._fence(holder, epoch)
        touched: set[str] = set()
        known = {c.uid for c in truth}
        waiting = set(pending)
        freed = 0
        kept = 0
        for uid, rec in list(self._records.items()):
            if uid in known:
                continue
            if rec.state == "reserved" and uid in waiting:
                kept += 1  # a bind in flight, ours or a previous leader's
                continue
            self._drop(uid, touched)
            freed += 1
        added = 0
        conflicts: list[str] = []
        for claim in truth:
            current = self._records.get(claim.uid)
            if current is not None and current.claim == claim and current.state == "bound":
                continue
            self._drop(claim.uid, touched)
            problem = self._check([claim])
            if problem:
                conflicts.append(f"pod {claim.pod}: {problem}")
            self._write(claim, "bound", epoch, touched)
            added += 1
        # Every gang record is rebuilt from the pod records.
        self._members = {}
        for uid, rec in self._records.items():
            if rec.claim.gang:
                self._members.setdefault(rec.claim.gang, set()).add(uid)
        stale = set(self._gangs)
        self._gangs = {}
        self._settle(stale | set(self._members), epoch)
        if nodes is not None:
            self._nodes = dict(nodes)
        return ReconcileReport(added, freed, kept, tuple(conflicts))

    # ---- nominations (base.py) ----------------------------------------------------------------

    async def nominate(self, holder: str, epoch: int, nomination: Nomination, now_ms: int) -> None:
        self._fence(holder, epoch)
        self._nominations.pop(nomination.uid, None)
        self._prune_nominations(now_ms)
        if nomination.expires_ms > now_ms:
            self._nominations[nomination.uid] = nomination

    async def drop_nominations(
        self, holder: str, epoch: int, uids: list[str], now_ms: int | None = None
    ) -> None:
        self._fence(holder, epoch)
        for uid in uids:
            self._nominations.pop(uid, None)
        if now_ms is not None:
            self._prune_nominations(now_ms)

    def _prune_nominations(self, now_ms: int) -> None:
        for uid in [u for u, n in self._nominations.items() if n.expires_ms <= now_ms]:
            del self._nominations[uid]

    async def nominations(self, now_ms: int) -> dict[str, Nomination]:
        return {u: n for u, n in self._nominations.items() if n.expires_ms > now_ms}

    # ---- reads ---------------------------------------------------------------------------------

    async def records(self) -> dict[str, Record]:
        return dict(self._records)

    async def gangs(self) -> dict[str, GangRecord]:
        return dict(self._gangs)

    async def owners(self, node: str) -> dict[int, Owner]:
        return {index: o for (n, index), o in self._owners.items() if n == node}

    async def nodes(self) -> dict[str, str]:
        return dict(self._nodes)

    async def close(self) -> None:
        return None
