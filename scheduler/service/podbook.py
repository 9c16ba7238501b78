"""The pod book: one entry per pod the live scheduler tracks, with an explicit stage, and the one
transition table that says what every event does to it (in the spirit of h11's ``_state.py``).

Everything that can happen to a pod is an event: the watches (pending or bound pod seen, left,
ended, missing from a re-list), the loop and the scheduling cycle (elected, taken, placed, not
placed, not ready, crashed), the store (reservation written or refused), the binder (bound,
refused, gone, bound elsewhere, unknown), a re-read of the pod from the apiserver (still
pending, bound, gone) and preemption (searched, nominated, its nomination ended, expired or
reset, its victims gone). ``TABLE`` maps (stage, event) to the next stage and the effects to
run; the book only moves entries, effects.py runs the effects, each exactly what its name says:
no condition outside the table decides what happens to a pod, every move of a pod in the
queue is an effect, and so is every write of a preemptor's nomination and of the PodGroup
status's members. A pair missing from the table is a bug: it is logged, counted and leaves the
entry as it was. docs/architecture.md shows the table (a unit test checks it is this one).

Stages (a pod the book does not hold is GONE):

- PENDING: ours and unbound; holds nothing; queued.
- UNSETTLED: pending as last seen, holding a reservation a previous leader made, whose Binding may
  still land: every Binding of a previous leader was sent before this replica's election (the
  fencing rule, binder.py) and commits, if at all, within the apiserver's request timeout
  (run.tuning.bindCommitSeconds) after it was sent. Not queued: it stays where the previous
  leader decided, held in the snapshot and reserved in the store, until a watch or a re-read
  says it is bound or gone, or a re-read made once that time has passed (SETTLE_DUE) says it is
  pending: then no Binding of the previous leader can land any more, and it is RELOADED. A
  replica deposed meanwhile settles nothing (DEPOSED: see RELOADED).
- RELOADED: pending, holding a reservation whose Bindings can no longer land; decided afresh when
  its turn comes, the GPUs it held free to it. A previous leader's reservation, or a gang
  member's own: its Binding was refused while its gang, below its minimum, has other members
  bound or binding (GANG_BIND_FAILED). Let go, the GPUs the gang was decided with would go to
  whoever waits for them (another gang: sim seed 629), and the gang would stay partial; held,
  the member is retried on them after its backoff: a gang's allocation is its own until the
  gang is bound whole or lets it go (a gang scheduler's all-or-nothing; kube-scheduler's
  per-pod retry alone would leave the gang split).
  Both holdings are a leader's: a deposed replica (DEPOSED) lets them go and re-reads an
  unsettled pod, so its book is any standby's (its snapshot holds nothing for a pending pod,
  and a pod deleted meanwhile leaves). Held on, the settling re-read and the turn that decides
  a reloaded pod, both a leader's, never came: a pod deleted while unsettled stayed held in the
  standby's snapshot for good (issue 30, sim seed 380). Elected again, it reloads the store's
  reservations, which the leaders since have kept.
- RESERVING: the cycle placed it and the snapshot assumes it (so the next decision sees its
  GPUs taken); the store reservation is being written. A refused one forgets it.
- BINDING: reserved in the store and assumed in the snapshot; the Binding is in flight.
- ASSUMED: our Binding succeeded; the bound watch has not shown the pod yet (so a bound re-list
  that lacks it re-reads the pod instead of freeing its GPUs).
- BOUND: the bound watch (or a re-read) shows the pod on a node; the snapshot holds the truth.
- OTHER: a bound pod the book does not schedule or hold GPUs for (another scheduler's, a
  DaemonSet's): the snapshot charges its cpu, memory, pod count, ports and labels, so it has an
  entry like any pod, and its end uncharges them (nothing of it is in the store).
- INHERITED: a previous leader's store record for a pod this replica's watches have not shown
  (bound just before a graceful handover: gone from the pending watch, not yet in the bound
  watch). The snapshot holds its GPUs until a re-read or a watch says where the pod is. A
  leader's holding too: a deposed replica (DEPOSED) lets it go and holds what its watches
  show, as any standby. Held on, the election's re-read answered after the deposition
  (pending) made it UNSETTLED in the standby, where nothing settles it: its GPUs stayed held
  in the standby's snapshot for good (issue 30, sim seed 3935).

An entry leaves when its pod leaves; everything per pod (first sighting, last reported reason,
explanation, a preemptor's nomination and its last fruitless search) lives in the entry, so it
leaves with it, and the table's ``leave`` effect takes the pod out of the queue in the same
step.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

import msgspec
import structlog

from scheduler.core.cycle import gang_of
from scheduler.core.model.decisions import Placement
from scheduler.core.model.objects import PodInput
from scheduler.core.snapshot.holdings import Holding
from scheduler.core.snapshot.nominations import Nominated

log = structlog.get_logger("podbook")


class Stage(enum.Enum):
    GONE = "gone"  # not in the book
    PENDING = "pending"
    UNSETTLED = "unsettled"
    RELOADED = "reloaded"
    RESERVING = "reserving"
    BINDING = "binding"
    ASSUMED = "assumed"
    BOUND = "bound"
    OTHER = "other"
    INHERITED = "inherited"


class Event(enum.Enum):
    # pending pods' watch
    PENDING_SEEN = "pending-seen"  # added, modified or listed: ours and unbound, new or changed
    PENDING_SAME = "pending-same"  # the same object again (a re-list, a status write of ours)
    PENDING_LEFT = "pending-left"  # deleted from the watch or missing from a re-list: bound or gone
    PENDING_ENDED = "pending-ended"  # being deleted or finished before it was bound
    # bound pods' watch (the snapshot is charged before the event)
    BOUND_SEEN = "bound-seen"
    OTHER_SEEN = "other-seen"  # bound, not in the book as ours, holding no GPU we track
    BOUND_MOVED = "bound-moved"  # the device plugin reported other GPUs than the snapshot held
    BOUND_ENDED = "bound-ended"  # deleted or finished: its GPUs are free
    BOUND_MISSING = "bound-missing"  # a re-list of bound pods lacks it
    REPLACED = "replaced"  # another UID under the same name: this pod was deleted
    # leadership
    RELOAD = "reload"  # a previous leader's reservation for this pending pod was loaded
    INHERIT = "inherit"  # a previous leader's record for a pod no watch has shown
    DEPOSED = "deposed"  # this replica no longer leads: a leader's holdings go (on_lost)
    # No Binding a previous leader sent can land any more (bindCommitSeconds after the election)
    SETTLE_DUE = "settle-due"
    # scheduling cycle
    TAKEN = "taken"
    PLACED = "placed"
    NOT_PLACED = "not-placed"
    # A member of its gang is UNSETTLED: the gang is not decided until every member settles
    GANG_UNSETTLED = "gang-unsettled"
    # store
    RESERVE_OK = "reserve-ok"
    RESERVE_FAILED = "reserve-failed"  # conflict or store error: back off
    RESERVE_FENCED = "reserve-fenced"  # no longer leader: back to the queue
    # binder
    BIND_OK = "bind-ok"
    # BIND_OK for a Binding sent before an etcd restore began a new era (PodBook.new_era): the
    # restore may have undone it, and the new era's bound LIST, taken while it was binding,
    # said nothing of it (effects.py tells the two apart)
    BIND_OK_STALE = "bind-ok-stale"
    BIND_FAILED = "bind-failed"  # refused, or not sent (no longer leading)
    # BIND_FAILED while its gang is below its minimum with other members bound or binding (the
    # gang's partial commitment: effects.py tells the two apart)
    GANG_BIND_FAILED = "gang-bind-failed"
    BIND_GONE = "bind-gone"  # the pod no longer exists (404, or another UID) or has finished
    BIND_ELSEWHERE = "bind-elsewhere"  # bound by someone else: the pod read back is the truth
    BIND_UNKNOWN = "bind-unknown"  # no answer and the pod could not be read back
    # a re-read of the pod (effect CHECK)
    CHECKED_PENDING = "checked-pending"
    CHECKED_BOUND = "checked-bound"
    CHECKED_GONE = "checked-gone"
    # the queue (the loop and the cycle)
    ELECTED = "elected"  # this replica leads now: its pending pods queue
    NOT_READY = "not-ready"  # a watch its filters read has not listed yet: retry after backoff
    CRASHED = "crashed"  # its unit's attempt crashed: back off
    # preemption (preemption.py): a preemptor's search and nomination
    SEARCHED = "searched"  # a search for its unit: fruitless until a time, or found victims
    NOMINATED = "nominated"  # a nomination holds GPUs for it (its plan's, or reloaded)
    NOMINATION_ENDED = "nomination-ended"  # an eviction refused, or planned over: plans again
    NOMINATION_EXPIRED = "nomination-expired"  # held longer than the hold: the GPUs go back
    NOMINATION_RESET = "nomination-reset"  # elected again: the store's nominations are reloaded
    VICTIMS_GONE = "victims-gone"  # the last pod it waited for left, and the store freed it


class Effect(enum.Enum):
    # the entry and the queue
    KEEP_POD = "keep-pod"  # the entry keeps the pending object the event carries
    # the reason the pod shows is what the book holds as written; a leader writes its own at
    # once if the pod shows none (an etcd restore undid it: effects.py)
    SHOWN = "shown"
    ENQUEUE = "enqueue"  # the queue takes it (ready now unless backing off)
    DEQUEUE = "dequeue"  # out of the queue (it is bound)
    TAKE = "take"  # out of the queue for this attempt (a gang member decided with another)
    BACKOFF = "backoff"
    ACTIVATE = "activate"  # ready now, backoff or not: what it waited for has happened
    PARK = "park"  # unschedulable or waiting: queue, explanation, report
    LEAVE = "leave"  # the pod left the book: out of the queue too
    # waking waiting pods
    WAKE_GANG = "wake-gang"  # a member arrived or settled: its gang's waiting members retry
    WAKE = "wake"  # a bound pod: the waiting pods it may help retry (core/filters/requeue.py)
    RETRY = "retry"  # GPUs or resources were let go: every waiting pod retries
    # the snapshot
    HOLD = "hold"  # hold the reloaded or inherited reservation
    SETTLE = "settle"  # re-read it once no Binding of a previous leader can land (SETTLE_DUE)
    ASSUME = "assume"  # hold the placement (the core's assume)
    FORGET = "forget"  # drop what the snapshot assumed for it (ours, not the truth)
    CHARGE = "charge"  # the pod read back is bound: the snapshot holds its truth
    FREE = "free"  # the pod left: the snapshot lets its GPUs, record and gang membership go
    # the store
    MARK_BOUND = "mark-bound"  # its reservation is bound
    RELEASE_STORE = "release-store"  # drop its reservation or record
    RESERVE_STORE = "reserve-store"  # its store record is the reservation it holds (not bound)
    RECONCILE = "reconcile"  # the store must follow the snapshot: reconcile (rate-limited)
    # the apiserver
    BIND = "bind"  # done with the queue; the cycle hands its unit's Bindings to the binder
    REBIND = "rebind"  # send the same Binding again: the last one's outcome is unknown
    CHECK = "check"  # re-read the pod until the apiserver answers (one re-read at a time)
    SCHEDULED = "scheduled"  # report the bind (event, latency, explanation)
    UNRESERVE = "unreserve"  # its claims reserved for it (held nowhere here): Unreserve them
    # a preemptor's nomination (held in its entry, the snapshot, the store and the pod)
    NOTE_SEARCH = "note-search"  # the entry keeps the search the event carries (or none)
    NOMINATE = "nominate"  # the entry and the snapshot hold the nomination the event carries
    END_NOMINATION = "end-nomination"  # it ends: the entry's, the snapshot's, the store's
    FORGET_NOMINATION = "forget-nomination"  # the entry's and the snapshot's go (not the store's)
    RESTORE_NOMINATION = "restore-nomination"  # pending again: its nomination holds again
    CLEAR_NOMINATED_NODE = "clear-nominated-node"  # the pod's status.nominatedNodeName
    # the other parts' per-pod state
    VICTIM_LEFT = "victim-left"  # preemptors whose last victim it was are tried at once
    MEMBER_LEFT = "member-left"  # its gang may have fallen below its minimum (stale gangs)
    GROUP_COUNT = "group-count"  # its PodGroup's status counts it as the bound watch shows it
    GROUP_DROP = "group-drop"  # its PodGroup's status drops it (a finished one is kept)


S, E, F = Stage, Event, Effect
_ = ()
# A pod of ours left (deleted, finished, replaced, gone on a re-read) while it held something:
# the snapshot and the store let it go, waiting pods retry, and nothing of it stays.
_LEFT = (F.FREE, F.RELEASE_STORE, F.RETRY, F.VICTIM_LEFT, F.END_NOMINATION, F.LEAVE)
# The same for a pod that was bound (its gang may be below its minimum now); told before FREE.
_BOUND_LEFT = (F.MEMBER_LEFT, F.FREE, F.RELEASE_STORE, F.RETRY, F.VICTIM_LEFT, F.LEAVE)
# A pending pod of ours that left, holding nothing.
_PENDING_LEFT = (F.END_NOMINATION, F.LEAVE)
# A preemptor's nomination ended off the cycle (an eviction for it refused, or a preemptor of
# higher priority planned over its GPUs): it ends everywhere, the next attempt searches afresh,
# and the GPUs it held go back to the waiting pods at the loop's next turn.
_NOMINATION_ENDED = (F.END_NOMINATION, F.NOTE_SEARCH, F.CLEAR_NOMINATED_NODE)
# The same when it expired; a fruitless search made meanwhile still stands.
_NOMINATION_EXPIRED = (F.END_NOMINATION, F.CLEAR_NOMINATED_NODE)

# (stage, event) -> (next stage, effects in order). Anything else is an error.
TABLE: dict[tuple[Stage, Event], tuple[Stage, tuple[Effect, ...]]] = {
    # ---- not in the book -------------------------------------------------------------------
    (S.GONE, E.PENDING_SEEN): (S.PENDING, (F.KEEP_POD, F.SHOWN, F.ENQUEUE, F.WAKE_GANG)),
    (S.GONE, E.PENDING_SAME): (S.PENDING, (F.KEEP_POD, F.SHOWN, F.ENQUEUE, F.WAKE_GANG)),
    (S.GONE, E.PENDING_LEFT): (S.GONE, _),
    (S.GONE, E.PENDING_ENDED): (S.GONE, _),
    (S.GONE, E.BOUND_SEEN): (S.BOUND, (F.GROUP_COUNT, F.WAKE)),
    (S.GONE, E.OTHER_SEEN): (S.OTHER, (F.GROUP_COUNT, F.WAKE)),
    (S.GONE, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP,)),
    (S.GONE, E.INHERIT): (S.INHERITED, (F.HOLD, F.CHECK)),
    # Results about a pod that left meanwhile: whatever the store holds for it goes.
    (S.GONE, E.RESERVE_OK): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.RESERVE_FAILED): (S.GONE, _),
    (S.GONE, E.RESERVE_FENCED): (S.GONE, _),
    (S.GONE, E.BIND_OK): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.BIND_OK_STALE): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.BIND_FAILED): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.GANG_BIND_FAILED): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.BIND_GONE): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.BIND_ELSEWHERE): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.BIND_UNKNOWN): (S.GONE, (F.RELEASE_STORE,)),
    (S.GONE, E.CHECKED_PENDING): (S.GONE, _),
    (S.GONE, E.CHECKED_BOUND): (S.GONE, _),
    (S.GONE, E.CHECKED_GONE): (S.GONE, _),
    # Not placed, and it left while the decision waited for the apiserver (a preemption's
    # evictions): nothing of it is left to park.
    (S.GONE, E.NOT_PLACED): (S.GONE, _),
    (S.GONE, E.CRASHED): (S.GONE, _),
    (S.GONE, E.VICTIMS_GONE): (S.GONE, _),
    # ---- pending, holding nothing ----------------------------------------------------------
    (S.PENDING, E.PENDING_SEEN): (S.PENDING, (F.KEEP_POD, F.SHOWN, F.ENQUEUE)),
    # A re-delivery, or a status write: nothing new to try, but the condition it shows may not
    # be the reason of its last decision (an etcd restore undid it, sim seeds 13078, 23014).
    (S.PENDING, E.PENDING_SAME): (S.PENDING, (F.SHOWN,)),
    (S.PENDING, E.PENDING_LEFT): (S.GONE, _PENDING_LEFT),
    (S.PENDING, E.PENDING_ENDED): (S.GONE, _PENDING_LEFT),
    (S.PENDING, E.BOUND_SEEN): (S.BOUND, (F.GROUP_COUNT, F.DEQUEUE, F.END_NOMINATION, F.WAKE)),
    (S.PENDING, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_PENDING_LEFT)),
    (S.PENDING, E.REPLACED): (S.GONE, _PENDING_LEFT),
    # A previous leader's reservation: its Binding may still land, so it stays where it is.
    (S.PENDING, E.RELOAD): (S.UNSETTLED, (F.DEQUEUE, F.HOLD, F.SETTLE)),
    (S.PENDING, E.TAKEN): (S.PENDING, (F.TAKE,)),
    (S.PENDING, E.PLACED): (S.RESERVING, (F.ASSUME,)),
    # Not placed, it holds nothing here: a claim still reserved for it (a Binding another
    # leader abandoned, its Unreserve never sent) is Unreserved, as after a refused Binding.
    (S.PENDING, E.NOT_PLACED): (S.PENDING, (F.PARK, F.UNRESERVE)),
    # A member still held where a previous leader decided may yet be bound there: the others
    # wait for it (decided now, without it, the gang could be split); its settling wakes them.
    (S.PENDING, E.GANG_UNSETTLED): (S.PENDING, (F.PARK,)),
    # The answer to a reservation written for the pod before it left the pending watch and
    # came back under the same UID (an etcd restore to before it left): that decision was let
    # go when it left, so what the reservation wrote goes too; the pod is decided afresh.
    (S.PENDING, E.RESERVE_OK): (S.PENDING, (F.RELEASE_STORE,)),
    (S.PENDING, E.RESERVE_FAILED): (S.PENDING, _),
    (S.PENDING, E.RESERVE_FENCED): (S.PENDING, _),
    (S.PENDING, E.CHECKED_PENDING): (S.PENDING, (F.SHOWN,)),
    # A re-read after a failed Binding found it bound (a Binding of ours whose answer was lost
    # landed): the truth is charged now, not when the bound watch says so (issue 30, 1b).
    (S.PENDING, E.CHECKED_BOUND): (
        S.BOUND,
        (F.CHARGE, F.DEQUEUE, F.RECONCILE, F.END_NOMINATION, F.WAKE),
    ),
    (S.PENDING, E.CHECKED_GONE): (S.GONE, _PENDING_LEFT),
    (S.PENDING, E.ELECTED): (S.PENDING, (F.ENQUEUE,)),
    (S.PENDING, E.NOT_READY): (S.PENDING, (F.BACKOFF,)),
    (S.PENDING, E.CRASHED): (S.PENDING, (F.BACKOFF,)),
    (S.PENDING, E.SEARCHED): (S.PENDING, (F.NOTE_SEARCH,)),
    (S.PENDING, E.NOMINATED): (S.PENDING, (F.NOMINATE,)),
    (S.PENDING, E.NOMINATION_ENDED): (S.PENDING, _NOMINATION_ENDED),
    (S.PENDING, E.NOMINATION_EXPIRED): (S.PENDING, _NOMINATION_EXPIRED),
    (S.PENDING, E.NOMINATION_RESET): (S.PENDING, (F.FORGET_NOMINATION,)),
    # Its GPUs are held for it and nobody else may take them: no backoff to wait out.
    (S.PENDING, E.VICTIMS_GONE): (S.PENDING, (F.ACTIVATE,)),
    # ---- pending, holding a previous leader's reservation whose Binding may still land ------
    (S.UNSETTLED, E.PENDING_SEEN): (S.UNSETTLED, (F.KEEP_POD,)),  # not queued: not decided yet
    (S.UNSETTLED, E.PENDING_SAME): (S.UNSETTLED, _),
    # Bound by the previous leader's Binding, or deleted: the bound watch or the re-read at
    # SETTLE_DUE says which (a re-read now could not tell pending from "not landed yet").
    (S.UNSETTLED, E.PENDING_LEFT): (S.UNSETTLED, _),
    (S.UNSETTLED, E.PENDING_ENDED): (S.GONE, _LEFT),
    # Settled (bound, pending or gone): the gang members that waited for it retry.
    (S.UNSETTLED, E.BOUND_SEEN): (
        S.BOUND,
        (F.GROUP_COUNT, F.RECONCILE, F.END_NOMINATION, F.WAKE, F.WAKE_GANG),
    ),
    (S.UNSETTLED, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_LEFT)),
    (S.UNSETTLED, E.REPLACED): (S.GONE, _LEFT),
    (S.UNSETTLED, E.RELOAD): (S.UNSETTLED, (F.HOLD, F.SETTLE)),
    (S.UNSETTLED, E.SETTLE_DUE): (S.UNSETTLED, (F.CHECK,)),
    # Read once no Binding of the previous leader can land: still pending, so decided afresh.
    (S.UNSETTLED, E.CHECKED_PENDING): (S.RELOADED, (F.SHOWN, F.ENQUEUE, F.WAKE_GANG)),
    (S.UNSETTLED, E.CHECKED_BOUND): (
        S.BOUND,
        (F.CHARGE, F.RECONCILE, F.END_NOMINATION, F.WAKE, F.WAKE_GANG),
    ),
    (S.UNSETTLED, E.CHECKED_GONE): (S.GONE, _LEFT),
    (S.UNSETTLED, E.CRASHED): (S.UNSETTLED, _),
    (S.UNSETTLED, E.NOMINATION_ENDED): (S.UNSETTLED, _NOMINATION_ENDED),
    (S.UNSETTLED, E.NOMINATION_EXPIRED): (S.UNSETTLED, _NOMINATION_EXPIRED),
    (S.UNSETTLED, E.NOMINATION_RESET): (S.UNSETTLED, (F.FORGET_NOMINATION,)),
    (S.UNSETTLED, E.VICTIMS_GONE): (S.UNSETTLED, _),  # not queued
    # Deposed: nothing will settle it here (SETTLE_DUE is a leader's timer). A standby holds
    # nothing for a pending pod; the re-read says whether it left the pending watch meanwhile
    # (PENDING_LEFT left it as it was: bound, or deleted for good, issue 30's sim seed 380).
    (S.UNSETTLED, E.DEPOSED): (S.PENDING, (F.FORGET, F.ENQUEUE, F.CHECK)),
    # ---- pending, holding a previous leader's reservation ----------------------------------
    (S.RELOADED, E.PENDING_SEEN): (S.RELOADED, (F.KEEP_POD, F.SHOWN, F.ENQUEUE)),
    (S.RELOADED, E.PENDING_SAME): (S.RELOADED, (F.SHOWN,)),
    # Bound by the previous leader's late Binding, or deleted: read it back before freeing.
    (S.RELOADED, E.PENDING_LEFT): (S.RELOADED, (F.CHECK,)),
    (S.RELOADED, E.PENDING_ENDED): (S.GONE, _LEFT),
    (S.RELOADED, E.BOUND_SEEN): (
        S.BOUND,
        (F.GROUP_COUNT, F.DEQUEUE, F.RECONCILE, F.END_NOMINATION, F.WAKE),
    ),
    (S.RELOADED, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_LEFT)),
    (S.RELOADED, E.REPLACED): (S.GONE, _LEFT),
    (S.RELOADED, E.RELOAD): (S.RELOADED, (F.HOLD,)),
    # Decided afresh: the snapshot lets the old reservation go; the new one replaces it in the
    # store, and if there is none, the reconcile frees it. Waiting pods retry: decided elsewhere
    # or not at all (the cluster changed, its gang cannot be placed now), it leaves those GPUs
    # free, and nothing else would tell them (they waited beside free GPUs until the
    # unschedulable flush, minutes: sim seeds 17, 23 and 44).
    (S.RELOADED, E.TAKEN): (S.PENDING, (F.TAKE, F.FORGET, F.RECONCILE, F.RETRY)),
    # Its gang waits for a member still unsettled; it keeps holding where it was decided.
    (S.RELOADED, E.GANG_UNSETTLED): (S.RELOADED, (F.PARK,)),
    (S.RELOADED, E.CHECKED_PENDING): (S.RELOADED, (F.SHOWN,)),
    (S.RELOADED, E.CHECKED_BOUND): (
        S.BOUND,
        (F.CHARGE, F.DEQUEUE, F.RECONCILE, F.END_NOMINATION, F.WAKE),
    ),
    (S.RELOADED, E.CHECKED_GONE): (S.GONE, _LEFT),
    (S.RELOADED, E.ELECTED): (S.RELOADED, (F.ENQUEUE,)),
    (S.RELOADED, E.NOT_READY): (S.RELOADED, (F.BACKOFF,)),
    (S.RELOADED, E.CRASHED): (S.RELOADED, (F.BACKOFF,)),
    (S.RELOADED, E.SEARCHED): (S.RELOADED, (F.NOTE_SEARCH,)),
    (S.RELOADED, E.NOMINATED): (S.RELOADED, (F.NOMINATE,)),
    (S.RELOADED, E.NOMINATION_ENDED): (S.RELOADED, _NOMINATION_ENDED),
    (S.RELOADED, E.NOMINATION_EXPIRED): (S.RELOADED, _NOMINATION_EXPIRED),
    (S.RELOADED, E.NOMINATION_RESET): (S.RELOADED, (F.FORGET_NOMINATION,)),
    (S.RELOADED, E.VICTIMS_GONE): (S.RELOADED, (F.ACTIVATE,)),
    # Deposed: no turn of this replica's decides it afresh; a standby holds nothing for it.
    (S.RELOADED, E.DEPOSED): (S.PENDING, (F.FORGET,)),
    # ---- assumed; the store reservation is being written ------------------------------------
    # Still pending in the apiserver (its Binding is not sent yet): what it shows is the truth
    # of what was written, as while it waited. A restore that undid its reason now, then a
    # failed reservation, sent it back to pending holding the reason as written, and the same
    # reason decided again was never written (sim seed 30598).
    (S.RESERVING, E.PENDING_SEEN): (S.RESERVING, (F.KEEP_POD, F.SHOWN)),
    (S.RESERVING, E.PENDING_SAME): (S.RESERVING, (F.SHOWN,)),
    # Gone: the assumption goes; the store's answer for a pod no longer in the book (GONE,
    # RESERVE_OK) releases whatever the reservation wrote. Left the pending watch (deleted, or
    # bound by someone else: the bound watch then shows it) is gone as from PENDING: no Binding
    # of ours was sent. Held on for the Binding's 404, it stayed in the book when the
    # reservation failed instead, pending again for good (an etcd restore to before the pod
    # was created: the new era's LIST lacked it), and preempted pods for a gang that no longer
    # existed while another pod waited beside a free GPU it held nominated (soak seed 50161).
    (S.RESERVING, E.PENDING_LEFT): (S.GONE, _LEFT),
    (S.RESERVING, E.PENDING_ENDED): (S.GONE, _LEFT),
    (S.RESERVING, E.BOUND_SEEN): (S.BOUND, (F.GROUP_COUNT, F.DEQUEUE, F.END_NOMINATION, F.WAKE)),
    (S.RESERVING, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_LEFT)),
    (S.RESERVING, E.REPLACED): (S.GONE, _LEFT),
    (S.RESERVING, E.RESERVE_OK): (S.BINDING, (F.BIND,)),
    (S.RESERVING, E.RESERVE_FAILED): (
        S.PENDING,
        (F.FORGET, F.RETRY, F.BACKOFF, F.RESTORE_NOMINATION),
    ),
    (S.RESERVING, E.RESERVE_FENCED): (
        S.PENDING,
        (F.FORGET, F.RETRY, F.ENQUEUE, F.RESTORE_NOMINATION),
    ),
    (S.RESERVING, E.CHECKED_PENDING): (S.RESERVING, (F.SHOWN,)),
    (S.RESERVING, E.CHECKED_BOUND): (S.RESERVING, _),
    (S.RESERVING, E.CHECKED_GONE): (S.RESERVING, _),
    (S.RESERVING, E.CRASHED): (S.RESERVING, _),  # its reservation's answer tells
    # A preemptor placed keeps its nomination until it binds (a Binding may fail).
    (S.RESERVING, E.NOMINATION_ENDED): (S.RESERVING, _NOMINATION_ENDED),
    (S.RESERVING, E.NOMINATION_EXPIRED): (S.RESERVING, _NOMINATION_EXPIRED),
    (S.RESERVING, E.NOMINATION_RESET): (S.RESERVING, (F.FORGET_NOMINATION,)),
    (S.RESERVING, E.VICTIMS_GONE): (S.RESERVING, _),  # not queued
    # ---- the Binding is in flight ----------------------------------------------------------
    (S.BINDING, E.PENDING_SEEN): (S.BINDING, _),  # older than our bind
    (S.BINDING, E.PENDING_SAME): (S.BINDING, _),
    (S.BINDING, E.PENDING_LEFT): (S.BINDING, _),  # our bind moved it off the pending watch
    (S.BINDING, E.PENDING_ENDED): (S.GONE, _LEFT),
    # Bound where it was reserved: its reservation is bound now (the binder stops at a pod
    # the book holds bound, so an unanswered Binding's answer may never mark it).
    (S.BINDING, E.BOUND_SEEN): (
        S.BOUND,
        (F.GROUP_COUNT, F.MARK_BOUND, F.END_NOMINATION, F.WAKE),
    ),
    (S.BINDING, E.BOUND_MOVED): (S.BOUND, (F.GROUP_COUNT, F.RECONCILE, F.END_NOMINATION)),
    (S.BINDING, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_LEFT)),
    (S.BINDING, E.REPLACED): (S.GONE, _LEFT),
    (S.BINDING, E.BIND_OK): (S.ASSUMED, (F.MARK_BOUND, F.SCHEDULED, F.END_NOMINATION)),
    # Answered 201, but sent before an etcd restore began the era the book is in: the restore
    # may have undone it (taken before the Binding, or before the pod was created), and the
    # bound watch, listed in the new era while the pod was binding, will never show it. Held
    # as assumed on the 201 alone, its GPUs stayed taken by a pod that was not on them, or did
    # not exist, for good (issue 30, sim seeds 726, 1101, 1318). Re-read: an assumed pod read
    # pending is scheduled afresh, one gone leaves. (kube-scheduler's cache once expired an
    # assumed pod the informer never confirmed after a TTL; since kubernetes#106361 it never
    # does, as a TTL raced slow Bindings: a read asks the apiserver instead of guessing.)
    (S.BINDING, E.BIND_OK_STALE): (
        S.ASSUMED,
        (F.MARK_BOUND, F.SCHEDULED, F.END_NOMINATION, F.CHECK),
    ),
    # Not bound: let the assumption and the reservation go; re-read it in case it left. A
    # preemptor holds its nominated GPUs again (a Binding may fail: they were kept for it).
    (S.BINDING, E.BIND_FAILED): (
        S.PENDING,
        (F.FORGET, F.RELEASE_STORE, F.RETRY, F.BACKOFF, F.CHECK, F.RESTORE_NOMINATION),
    ),
    # The same while its gang is below its minimum with other members bound or binding: the
    # gang keeps what it was decided with (RELOADED: the GPUs stay held, in the store too),
    # and the member is decided again after its backoff, those GPUs free to it. Nothing was
    # let go, so nobody retries.
    (S.BINDING, E.GANG_BIND_FAILED): (S.RELOADED, (F.BACKOFF, F.CHECK)),
    (S.BINDING, E.BIND_GONE): (S.GONE, _LEFT),
    # Bound by someone else (a previous leader): where it is bound is the truth.
    (S.BINDING, E.BIND_ELSEWHERE): (S.BOUND, (F.CHARGE, F.RECONCILE, F.END_NOMINATION)),
    # Maybe bound (a Binding abandoned at its timeout may still commit): hold everything and
    # send the same Binding again until an answer says (201, or 409 on a pod bound as we asked).
    (S.BINDING, E.BIND_UNKNOWN): (S.BINDING, (F.REBIND,)),
    # A re-read started before this Binding (after an earlier one failed): pending says nothing
    # of a Binding in flight; only the binder's answer does.
    (S.BINDING, E.CHECKED_PENDING): (S.BINDING, _),
    (S.BINDING, E.CHECKED_BOUND): (S.BOUND, (F.CHARGE, F.RECONCILE, F.END_NOMINATION)),
    (S.BINDING, E.CHECKED_GONE): (S.GONE, _LEFT),
    (S.BINDING, E.CRASHED): (S.BINDING, _),
    (S.BINDING, E.NOMINATION_ENDED): (S.BINDING, _NOMINATION_ENDED),
    (S.BINDING, E.NOMINATION_EXPIRED): (S.BINDING, _NOMINATION_EXPIRED),
    (S.BINDING, E.NOMINATION_RESET): (S.BINDING, (F.FORGET_NOMINATION,)),
    (S.BINDING, E.VICTIMS_GONE): (S.BINDING, _),
    # ---- bound by us, not yet seen by the bound watch --------------------------------------
    (S.ASSUMED, E.PENDING_SEEN): (S.ASSUMED, _),  # a pending re-list older than our bind
    (S.ASSUMED, E.PENDING_SAME): (S.ASSUMED, _),
    (S.ASSUMED, E.PENDING_LEFT): (S.ASSUMED, _),
    (S.ASSUMED, E.PENDING_ENDED): (S.GONE, _LEFT),
    (S.ASSUMED, E.BOUND_SEEN): (S.BOUND, (F.GROUP_COUNT, F.WAKE)),
    (S.ASSUMED, E.BOUND_MOVED): (S.BOUND, (F.GROUP_COUNT, F.RECONCILE)),
    (S.ASSUMED, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_LEFT)),
    # A re-list that started before our bind landed: read the pod rather than free it.
    (S.ASSUMED, E.BOUND_MISSING): (S.ASSUMED, (F.CHECK,)),
    (S.ASSUMED, E.REPLACED): (S.GONE, _LEFT),
    # Read pending after our Binding was answered 201 (effects.py's ``_check`` reads again when
    # its read began earlier): the Binding was undone (etcd restored from a backup taken before
    # it). Held on, its GPUs would stay taken by a pod that is not on them, for good. What the
    # pod shows is the backup's condition, not the reason written before the Binding (sim seed
    # 25470: held as written, the same reason decided again was never written).
    (S.ASSUMED, E.CHECKED_PENDING): (
        S.PENDING,
        (F.KEEP_POD, F.SHOWN, F.FORGET, F.RELEASE_STORE, F.RETRY, F.ENQUEUE, F.WAKE_GANG),
    ),
    (S.ASSUMED, E.CHECKED_BOUND): (S.BOUND, (F.CHARGE,)),
    (S.ASSUMED, E.CHECKED_GONE): (S.GONE, _LEFT),
    (S.ASSUMED, E.CRASHED): (S.ASSUMED, _),
    (S.ASSUMED, E.VICTIMS_GONE): (S.ASSUMED, _),
    # ---- bound: the apiserver's truth ------------------------------------------------------
    (S.BOUND, E.PENDING_SEEN): (S.BOUND, _),  # a node name is never unset: a stale event
    (S.BOUND, E.PENDING_SAME): (S.BOUND, _),
    (S.BOUND, E.PENDING_LEFT): (S.BOUND, _),
    (S.BOUND, E.PENDING_ENDED): (S.BOUND, _),  # the bound watch says when it ends
    (S.BOUND, E.BOUND_SEEN): (S.BOUND, (F.GROUP_COUNT,)),
    (S.BOUND, E.BOUND_MOVED): (S.BOUND, (F.GROUP_COUNT, F.RECONCILE)),
    (S.BOUND, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_BOUND_LEFT)),
    (S.BOUND, E.BOUND_MISSING): (S.GONE, (F.GROUP_DROP, *_BOUND_LEFT)),
    (S.BOUND, E.REPLACED): (S.GONE, _BOUND_LEFT),
    # Our bind's answer came after the watch showed the pod bound.
    (S.BOUND, E.BIND_OK): (S.BOUND, (F.MARK_BOUND, F.SCHEDULED)),
    (S.BOUND, E.BIND_OK_STALE): (S.BOUND, (F.MARK_BOUND, F.SCHEDULED)),  # the new era shows it
    (S.BOUND, E.BIND_FAILED): (S.BOUND, (F.RECONCILE,)),
    (S.BOUND, E.GANG_BIND_FAILED): (S.BOUND, (F.RECONCILE,)),
    (S.BOUND, E.BIND_GONE): (S.BOUND, (F.RECONCILE,)),
    (S.BOUND, E.BIND_ELSEWHERE): (S.BOUND, (F.CHARGE, F.RECONCILE)),
    (S.BOUND, E.BIND_UNKNOWN): (S.BOUND, (F.RECONCILE,)),
    # Reserved for a pod bound meanwhile: never bind it; the reconcile writes the truth.
    (S.BOUND, E.RESERVE_OK): (S.BOUND, (F.RECONCILE,)),
    (S.BOUND, E.RESERVE_FAILED): (S.BOUND, _),
    (S.BOUND, E.RESERVE_FENCED): (S.BOUND, _),
    (S.BOUND, E.NOT_PLACED): (S.BOUND, _),  # bound by someone else while it was decided
    (S.BOUND, E.CHECKED_PENDING): (S.BOUND, _),
    (S.BOUND, E.CHECKED_BOUND): (S.BOUND, _),
    (S.BOUND, E.CHECKED_GONE): (S.BOUND, _),  # the bound watch says when it ends
    (S.BOUND, E.CRASHED): (S.BOUND, _),
    (S.BOUND, E.VICTIMS_GONE): (S.BOUND, _),
    # ---- bound, another scheduler's, holding no GPU we track --------------------------------
    (S.OTHER, E.PENDING_SEEN): (S.OTHER, _),  # older than its bind
    (S.OTHER, E.PENDING_SAME): (S.OTHER, _),
    (S.OTHER, E.PENDING_LEFT): (S.OTHER, _),
    (S.OTHER, E.PENDING_ENDED): (S.OTHER, _),  # the bound watch says when it ends
    (S.OTHER, E.OTHER_SEEN): (S.OTHER, (F.GROUP_COUNT,)),
    (S.OTHER, E.BOUND_SEEN): (S.BOUND, (F.GROUP_COUNT,)),  # it holds GPUs now (annotated later)
    # Nothing of it is in the store, nor queued: the snapshot lets its record go.
    (S.OTHER, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, F.FREE, F.RETRY, F.VICTIM_LEFT)),
    (S.OTHER, E.BOUND_MISSING): (S.GONE, (F.GROUP_DROP, F.FREE, F.RETRY, F.VICTIM_LEFT)),
    (S.OTHER, E.REPLACED): (S.GONE, (F.FREE, F.RETRY, F.VICTIM_LEFT)),
    (S.OTHER, E.CHECKED_PENDING): (S.OTHER, _),
    (S.OTHER, E.CHECKED_BOUND): (S.OTHER, _),
    (S.OTHER, E.CHECKED_GONE): (S.OTHER, _),
    (S.OTHER, E.CRASHED): (S.OTHER, _),
    (S.OTHER, E.VICTIMS_GONE): (S.OTHER, _),
    # ---- a previous leader's record, no watch has shown its pod yet -------------------------
    # Its GPUs stay held (the reconcile keeps the record as bound) until a re-read or a watch
    # says: bound (the truth is charged), pending (unsettled: held where it is), gone.
    # Pending: the previous leader's reservation, whose Binding may still land (the record the
    # election's reconcile kept as bound is a reservation again).
    (S.INHERITED, E.PENDING_SEEN): (S.UNSETTLED, (F.KEEP_POD, F.RESERVE_STORE, F.SETTLE)),
    (S.INHERITED, E.PENDING_SAME): (S.UNSETTLED, (F.KEEP_POD, F.RESERVE_STORE, F.SETTLE)),
    (S.INHERITED, E.PENDING_LEFT): (S.INHERITED, _),
    (S.INHERITED, E.PENDING_ENDED): (S.GONE, _BOUND_LEFT),
    (S.INHERITED, E.BOUND_SEEN): (S.BOUND, (F.GROUP_COUNT, F.RECONCILE, F.WAKE)),
    (S.INHERITED, E.BOUND_MOVED): (S.BOUND, (F.GROUP_COUNT, F.RECONCILE)),
    (S.INHERITED, E.BOUND_ENDED): (S.GONE, (F.GROUP_DROP, *_BOUND_LEFT)),
    (S.INHERITED, E.REPLACED): (S.GONE, _BOUND_LEFT),
    (S.INHERITED, E.INHERIT): (S.INHERITED, (F.HOLD,)),
    (S.INHERITED, E.CHECKED_PENDING): (S.UNSETTLED, (F.KEEP_POD, F.RESERVE_STORE, F.SETTLE)),
    (S.INHERITED, E.CHECKED_BOUND): (S.BOUND, (F.CHARGE, F.RECONCILE, F.WAKE)),
    (S.INHERITED, E.CHECKED_GONE): (S.GONE, _BOUND_LEFT),
    (S.INHERITED, E.CRASHED): (S.INHERITED, _),
    (S.INHERITED, E.VICTIMS_GONE): (S.INHERITED, _),
    # Deposed: a standby holds what its watches show, and they have shown nothing of it; they
    # will show it bound, pending or nothing (a re-read still in flight then tells nothing).
    (S.INHERITED, E.DEPOSED): (S.GONE, (F.FORGET, F.LEAVE)),
}

# Stages whose reservation the store must keep at a reconcile (not the truth yet, not free).
RESERVED_STAGES = frozenset({S.UNSETTLED, S.RELOADED, S.RESERVING, S.BINDING})
# Stages whose snapshot holding is the truth of a bound pod (INHERITED: until a read says).
BOUND_STAGES = frozenset({S.ASSUMED, S.BOUND})
# Stages a bound re-list speaks about: a pod it lacks has left (or the LIST predates it).
LISTED_STAGES = frozenset({S.ASSUMED, S.BOUND, S.OTHER})
# Stages holding a reservation or record only a leader keeps: a deposed replica lets them go
# (DEPOSED).
DEPOSED_STAGES = frozenset({S.UNSETTLED, S.RELOADED, S.INHERITED})
# Stages the scheduling cycle may take a pod from.
SCHEDULABLE_STAGES = frozenset({S.PENDING, S.RELOADED})
# Events whose pod is news: what a watch or a read has just shown, so its resourceVersion is
# what the book is told (``PodBook.newest``, an entry's ``version``). Every other event's pod is
# the book's own copy (the queued pod a cycle decided, a Binding's pod), told when it arrived,
# maybe in an era that a restore has ended since (``new_era``): counted again, its version of
# the era before made the next bound LIST look like another restore (a wait for the pending
# LIST that never came: nothing decided, for good), and the pod's news of the new era "older"
# (issue 30, sim seeds 1148 and 1326).
NEWS = frozenset(
    {
        E.PENDING_SEEN,
        E.PENDING_SAME,
        E.BOUND_SEEN,
        E.OTHER_SEEN,
        E.BOUND_MOVED,
        E.BOUND_ENDED,
        E.BIND_ELSEWHERE,
        E.CHECKED_PENDING,
        E.CHECKED_BOUND,
        E.CHECKED_GONE,
    }
)
# News of the pod unbound (the pending watch, a re-read finding it pending) about an entry the
# book holds bound (in ``LISTED_STAGES`` after the event too): the book is told its version
# (``newest``), the entry is not. In one era such news is older than the Binding (a node name is
# never unset); in an era an etcd restore began, it is the restored history undoing the Binding.
# Neither says the pod is bound, and an entry's version is what the end of a bound LIST trusts
# as news newer than the LIST (``Intake.bound_list_end``: "the watch from the LIST's version
# tells"). Counted, the pending watch's news of the new era, newer than a bound LIST that lacked
# the pod, kept the pod bound in the book for good: the bound watch never tells of a pod that
# stays pending, nor of one deleted while pending (issue 30, sim seed 3260).
UNBOUND_NEWS = frozenset({E.PENDING_SEEN, E.PENDING_SAME, E.CHECKED_PENDING})


class Explanation(msgspec.Struct):
    """A pod's last decision, as /debug/pods shows it."""

    pod: str
    result: str
    reason: str = ""
    node: str = ""
    devices: tuple[int, ...] = ()
    gang: str | None = None
    attempts: int = 0


@dataclass(slots=True)
class Held:
    """A preemptor's nomination as this replica holds it (preemption.py)."""

    nominated: Nominated  # what the snapshot holds for it (again after a failed bind)
    deadline: float  # by the service's clock
    # The pods it waits for, key -> UID: its victims and the pods already terminating that its
    # plan counts on.
    victims: dict[str, str]
    # The book's era it was held in (PodBook.new_era): one of them seen bound and not
    # terminating in a later era was brought back by an etcd restore (preemption.py's
    # ``_undone``).
    era: int


@dataclass(slots=True)
class Entry:
    key: str
    uid: str
    stage: Stage
    first_seen: float
    pod: PodInput | None = None  # the latest pending object (None for pods only seen bound)
    placement: Placement | None = None  # while reserving, binding or assumed
    # The book's era its placement was decided in: its Bindings are sent in that era only
    # (effects.py's ``_bind``).
    era: int = 0
    # Which decision its placement is (PodBook.decide: the book's count, never reused): a
    # Binding's outcome is told to the entry only while it holds the decision that Binding
    # was of (effects.py's ``_bind``).
    decision: int = 0
    reported: str | None = None  # the reason the pod is to show (written, or to be written)
    # The reason the pod shows (None: none), as its last pending news or re-read showed it or
    # as this replica last wrote it; a decision's reason is written when it differs, and the
    # last one at once when news shows none (effects.py).
    written: str | None = None
    reporting: bool = False  # a write of it is under way (one at a time: effects.py)
    timed_out: bool = False  # its gang's GangTimeout event was sent
    explanation: Explanation | None = None  # the last decision, for /debug
    checking: bool = False  # a re-read (effect CHECK) is under way
    gang: str | None = None  # the pending object's gang (PodBook.set_pod)
    # The newest resourceVersion any event or read showed of this pod (but ``UNBOUND_NEWS``
    # while it is held bound).
    version: int = 0
    # Preemption's (preemption.py): the nomination held for this preemptor, and when a search
    # that found no victims may be repeated, with what it said.
    nomination: Held | None = None
    searched: tuple[float, str] | None = None


@dataclass
class Ctx:
    """What an event carries for its effects (each effect reads the fields it needs)."""

    pod: PodInput | None = None  # the pod as the event saw it
    placement: Placement | None = None
    holding: Holding | None = None  # RELOAD, INHERIT: the previous leader's reservation
    result: str = ""  # NOT_PLACED: "waiting" or "unschedulable"
    reason: str = ""
    retry_by: float | None = None
    gang: str | None = None
    timed_out: bool = False  # NOT_PLACED: the pod's gang waited longer than its timeout
    nomination: Held | None = None  # NOMINATED: what it holds
    searched: tuple[float, str] | None = None  # SEARCHED: until when, and what it said


class Dispatch(Protocol):
    """Tell the book an event about a pod (``Effects.dispatch``): the parts that feed the book
    and sit below the effects in the import order (preemption) are handed this."""

    def __call__(
        self, key: str, uid: str, event: Event, ctx: Ctx | None = None
    ) -> Transition | None: ...


@dataclass(frozen=True)
class Transition:
    key: str
    uid: str
    old: Stage
    event: Event
    new: Stage
    effects: tuple[Effect, ...]
    entry: Entry | None  # the entry after the transition (the one that left, when GONE)


@dataclass
class PodBook:
    entries: dict[str, Entry] = field(default_factory=dict)
    unexpected: Counter[tuple[Stage, Event]] = field(default_factory=Counter)
    # gang -> keys of the entries whose pending object names that gang (set_pod keeps it), so a
    # gang's members are found without walking every entry (the cycle asks once per gang).
    _gangs: dict[str, set[str]] = field(default_factory=dict)
    # The keys of the entries holding a nomination (nominate and unnominate keep it), so
    # preemption's timers and the victims' departures walk those, not every entry.
    nominated: set[str] = field(default_factory=set)
    # The highest resourceVersion any event has told the book in this era (``new_era``): a
    # LIST answered after that event is at least as high, unless the versions went back.
    newest: int = 0
    # How many eras began (``new_era``): a Binding's answer is of the era it was sent in.
    era: int = 0
    # How many placements were decided (``decide``): each entry's is its own number.
    decisions: int = 0
    # How many bound LISTs began (intake's ``bound_list_begin``): a 201 for a Binding during
    # which one began may be older than that LIST, which may not show it (effects.py's
    # ``_outcome``: it is re-read).
    bound_lists: int = 0
    # Which of them (its number among ``bound_lists``) is the last that ended: a pod it shows
    # running was running when it was asked for (preemption.py's ``_undone``).
    bound_listed: int = 0
    # The pod watches whose LIST is under way (intake's ``*_list_begin`` to ``*_list_end``),
    # and ``watching``: clear while both are, when no Binding is sent (binder.py's
    # ``_current``). Both pod watches re-listing at once is what a restart of the apiserver
    # looks like, and an etcd restore is one (every watch breaks before the restored history
    # is served); one watch re-lists alone after a 410 Gone, which says nothing of a restore,
    # and its Bindings go on.
    listing: set[str] = field(default_factory=set)
    watching: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.watching.set()

    def list_begun(self, watch: str) -> None:
        """A pod watch asked for a LIST (``watch``: "pending-pods" or "bound-pods")."""
        self.listing.add(watch)
        if self.listing >= {"pending-pods", "bound-pods"}:
            self.watching.clear()

    def list_ended(self, watch: str) -> None:
        """That LIST is all in."""
        self.listing.discard(watch)
        self.watching.set()

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def set_pod(self, entry: Entry, pod: PodInput | None) -> None:
        """The entry's latest pending object (its gang index follows)."""
        self._leave_gang(entry)
        entry.pod = pod
        entry.gang = gang_of(pod) if pod is not None else None
        if entry.gang is not None:
            self._gangs.setdefault(entry.gang, set()).add(entry.key)

    def _leave_gang(self, entry: Entry) -> None:
        if entry.gang is None:
            return
        keys = self._gangs.get(entry.gang)
        if keys is not None:
            keys.discard(entry.key)
            if not keys:
                del self._gangs[entry.gang]
        entry.gang = None

    def nominate(self, entry: Entry, held: Held) -> None:
        """The entry holds ``held`` (effect NOMINATE)."""
        entry.nomination = held
        self.nominated.add(entry.key)

    def unnominate(self, entry: Entry) -> Held | None:
        """The entry's nomination goes; the one it held, if any (END_NOMINATION and
        FORGET_NOMINATION)."""
        held, entry.nomination = entry.nomination, None
        if held is not None:
            self.nominated.discard(entry.key)
        return held

    def nominations(self) -> list[Entry]:
        """The entries holding a nomination, by key."""
        found = (self.entries.get(key) for key in sorted(self.nominated))
        return [e for e in found if e is not None and e.nomination is not None]

    def gang_members(self, gang: str, stages: frozenset[Stage]) -> list[Entry]:
        """The entries in ``stages`` whose pending object names ``gang``, by key."""
        found = (self.entries[k] for k in self._gangs.get(gang, ()))
        return sorted((e for e in found if e.stage in stages), key=lambda e: e.key)

    def gangs_in(self, stages: frozenset[Stage]) -> int:
        """How many gangs have a member in ``stages`` (the gangs waiting, for the metrics)."""
        return sum(
            any(self.entries[k].stage in stages for k in keys) for keys in self._gangs.values()
        )

    def pending_reasons(self, stages: frozenset[Stage]) -> Counter[str]:
        """The entries in ``stages`` by why they wait (for the metrics): ``preempting`` while a
        nomination is held for them, else their last decision's result (``unschedulable``,
        ``waiting`` for gang members or room, ``error``, ``scheduled`` when a bind failed and it
        is pending again), ``untried`` before their first attempt."""
        reasons: Counter[str] = Counter()
        for e in self.entries.values():
            if e.stage in stages:
                if e.nomination is not None:
                    reasons["preempting"] += 1
                else:
                    reasons[e.explanation.result if e.explanation else "untried"] += 1
        return reasons

    def stage(self, key: str, uid: str | None = None) -> Stage:
        entry = self.entries.get(key)
        if entry is None or (uid is not None and uid and entry.uid and entry.uid != uid):
            return S.GONE
        return entry.stage

    def new_era(self, version: int) -> None:
        """resourceVersions went back (etcd restored without ``--bump-revision``): the versions
        the book holds order nothing in the new era, so every entry forgets its own (news about
        it is news again) and the book counts from ``version``, the LIST that began the era.
        (The reasons the restore undid show in the pods its LISTs deliver: effect SHOWN.)"""
        for entry in self.entries.values():
            entry.version = 0
        self.newest = version
        self.era += 1

    def decide(self, entry: Entry) -> None:
        """The entry's placement was decided now, in this era: a number no other decision had."""
        self.decisions += 1
        entry.decision = self.decisions
        entry.era = self.era

    def decided_since(self, key: str, uid: str, decision: int) -> bool:
        """Whether the pod's entry holds a decision other than ``decision``: decided again
        since (after an etcd restore made it pending), or a new entry that was not."""
        entry = self.entries.get(key)
        if entry is None or (uid and entry.uid and entry.uid != uid):
            return False  # not this pod's entry: the GONE rows of the table
        return entry.decision != decision

    def in_stages(self, stages: frozenset[Stage]) -> list[Entry]:
        return [e for e in self.entries.values() if e.stage in stages]

    def handle(
        self, key: str, uid: str, event: Event, now: float, version: int = 0
    ) -> Transition | None:
        """Move ``key``'s entry by ``event``. An entry of another UID under the same name is the
        GONE stage for this event (the caller sends REPLACED to it first when the new pod is
        news). Returns None, logging and counting it, for a pair the table does not have."""
        entry = self.entries.get(key)
        if entry is not None and uid and entry.uid and entry.uid != uid:
            entry = None if event is not E.REPLACED else entry
        old = entry.stage if entry is not None else S.GONE
        if event is E.REPLACED and entry is None:
            return None
        step = TABLE.get((old, event))
        if step is None:
            self.unexpected[(old, event)] += 1
            log.error(
                "pod book: unexpected event",
                pod=key,
                uid=uid,
                stage=old.value,
                pod_event=event.value,
            )
            return None
        new, effects = step
        self.newest = max(self.newest, version)
        if new is S.GONE:
            if entry is not None:
                self._leave_gang(entry)
                del self.entries[key]
        elif entry is None:
            entry = Entry(key, uid, new, now, version=version)
            self.entries[key] = entry
        else:
            entry.stage = new
            if uid and not entry.uid:
                entry.uid = uid
            if not (new in LISTED_STAGES and event in UNBOUND_NEWS):
                entry.version = max(entry.version, version)
        return Transition(key, uid, old, event, new, effects, entry)

    def unexpected_total(self) -> int:
        return sum(self.unexpected.values())

    def sizes(self) -> dict[str, int]:
        """The number of entries, and of entries per stage (for tests and the soak benchmark).
        ``unexpected`` counts (stage, event) pairs, at most the table's size."""
        stages = Counter(e.stage for e in self.entries.values())
        return {
            "entries": len(self.entries),
            "gangs": len(self._gangs),
            **{s.value: stages[s] for s in Stage if s is not S.GONE},
            "unexpected": len(self.unexpected),
        }
