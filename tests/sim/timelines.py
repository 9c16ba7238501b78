"""Schedules written by hand in the simulation's own vocabulary (``SimMachine``'s rules), for
timelines the random search has not reached within its budget yet: each proves the world can
express the timeline, and is replayed by ``soak.py --timelines`` (each one's violations, or
"holds"). When the bug is fixed, the timeline must hold.
"""

from __future__ import annotations

from collections.abc import Callable

from .machine import FullMachine, SimMachine


def past_first_wait(m: SimMachine) -> None:
    """The first leader's wait (no leader recorded: one lease plus bindCommitSeconds) over."""
    for _ in range(5):
        m.tick(16.0)


def inheritance_by_name(m: SimMachine) -> None:
    """Issue 30 bug 3: election inheritance matches store records by pod name, not UID. The
    standby (r2) saw a (uid1) bound on n1/0; its bound watch lags and its pending watch
    re-lists after a was recreated (uid2, 2 GPUs) and bound by r1 on n1/0,1, so r2's book still
    holds uid1 under the name; a rolling update makes r2 leader, which does not inherit uid2's
    record (the name is known) and binds c on n1/1."""
    m.create_pod("a", 1, False)
    m.create_pod("b", 2, False)
    past_first_wait(m)
    m.tick(2.0)
    m.lag(1, "bound", 20.0)
    m.lag(1, "pending", 5.0)
    m.recreate_pod(0, 2)
    m.tick(2.0)
    m.relist(1, "pending")
    m.create_pod("c", 1, False)
    m.tick(5.0)
    m.handover()
    m.tick(5.0)
    m.tick(5.0)
    m.safe()
    m.quiesce()


def witness_off_after_403(m: SimMachine) -> None:
    """Issue 30 bug 4: one transient 403 turns the epoch witness off for good, and an off
    witness fences nothing. r1 leads; three of the four GPUs are taken; one read of the witness
    (after a renewal) is refused 403; the store fails over and a partition leaves r1 on the old
    master, which still takes its renewals; r2 is elected on the promoted replica, records
    itself and waits out r1's Bindings (one lease plus bindCommitSeconds). With the witness on,
    r1's next renewal finds r2 recorded and r1 stops leading before r2's first decision; with
    it off, both lead: r2 binds b on the free GPU while r1's watches lag, then r1, which never
    saw b bound, binds c there too."""
    m.create_pod("a", 1, False)
    m.create_pod("f1", 1, False)
    m.create_pod("f2", 1, False)
    m.tick(16.0)
    for _ in range(4):
        m.tick(16.0)
    m.tick(2.0)
    m.witness_fault("read", 0.0)
    m.tick(5.0)
    m.failover(False, 140.0)
    for _ in range(6):  # r2 elected once r1's lease lapses there, then its first wait
        m.tick(16.0)
    m.lag(0, "pending", 10.0)  # r1 does not see b ...
    m.lag(0, "bound", 40.0)  # ... nor b bound
    m.create_pod("b", 1, False)
    m.tick(12.0)
    m.create_pod("c", 1, False)
    m.tick(5.0)
    m.quiesce()


def claim_write_fail_forgets(m: SimMachine) -> None:
    """Issue 30 bug 1a: a's first Binding hangs in a slow apiserver (it commits 20 s later), the
    retries time out, the read-back says pending: a is kept BINDING and re-sent; the re-send's
    ResourceClaim write fails. Forgetting a's GPU there gives it to c, and a's first Binding
    lands on it."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    m.bind_fault("slow")
    m.bind_fault("timeout")
    m.bind_fault("timeout")
    m.create_pod("a", 1, True)
    m.tick(2.0)
    m.bind_fault("claim-fail")
    m.bind_fault("claim-fail")  # the Unreserve after it too: no claim event wakes a before c
    m.create_pod("c", 1, False)
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()


def checked_bound_ignored(m: SimMachine) -> None:
    """Issue 30 bug 1b: a's Binding commits but is answered 500 (etcd's answer lost inside the
    apiserver), the retries are refused 500: a failed, pending again, its GPU forgotten. Its
    re-read (reads fail meanwhile) finds it bound on n2/1: it must be charged at once, for the
    leader's bound watch lags and c comes before a's retry."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    m.lag(0, "bound", 20.0)
    m.reads_fail(1.0)
    m.bind_fault("500-committed")
    m.bind_fault("500")
    m.bind_fault("500")
    m.create_pod("a", 1, False)
    m.tick(2.0)
    m.create_pod("c", 1, False)
    for _ in range(4):
        m.tick(5.0)
    m.quiesce()


def checked_pending_forgets(m: SimMachine) -> None:
    """Issue 30 bug 1: a's Binding is refused 500 three times (failed: pending again, a re-read
    asked for, which fails while reads fail); a is decided again and its new Binding hangs in a
    slow apiserver (it commits 20 s later), the retries time out. The re-read then answers
    "pending": that says nothing of the Binding in flight, and forgetting a's GPU there gives
    it to c."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    m.reads_fail(10.0)
    for fault in ("500", "500", "500", "slow", "timeout", "timeout"):
        m.bind_fault(fault)
    m.create_pod("a", 1, False)
    m.tick(5.0)
    m.tick(5.0)
    m.create_pod("c", 1, False)
    for _ in range(4):
        m.tick(5.0)
    m.quiesce()


def no_unreserve(m: SimMachine) -> None:
    """Issue 30 bug 1 (Unreserve): a's ResourceClaim is reserved for it, its Binding refused 403
    three times: failed. c takes the last GPU meanwhile, so a stays pending: its claim must not
    stay reserved for it (kube-scheduler's Unreserve)."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    for _ in range(3):
        m.bind_fault("403")
    m.create_pod("a", 1, True)
    m.tick(2.0)
    m.create_pod("c", 1, False)
    m.tick(5.0)
    m.quiesce()


def reload_decided_at_once(m: SimMachine) -> None:
    """Issue 30 bug 2: leader r1 decides a onto n2/1 and its Binding hangs in a slow apiserver
    (it commits 20 s later); a rolling update hands over to r2 with a still binding. The
    cluster changes (b and d end): r2, deciding a afresh at once, puts it on n1 and c (2 GPUs)
    on n2/0,1; r1's Binding of a lands on n2/1 first, and c's on n2/0,1 after it. r2 sends
    a's and c's Bindings in the same instant, in either order (its retries too), so both
    first Bindings hang and both retries time out: a's on n1 cannot land before r1's, and
    c's lands, whichever of the two takes which fault."""
    m.create_pod("b", 1, False)
    m.create_pod("e", 1, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    for fault in ("slow", "500", "500", "slow", "slow", "timeout", "timeout"):
        m.bind_fault(fault)
    m.create_pod("a", 1, False)
    m.tick(0.5)
    m.handover()
    m.delete_pod(1, False)  # b
    m.delete_pod(1, False)  # d
    m.create_pod("c", 2, False)
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()


def deposed_binding_held(m: SimMachine) -> None:
    """Soak seed 691 (its shrunk schedule): r1's first wait over (since sim seed 836 an election
    is chained only to a leader whose wait was over), 0.9 s pass in steps of 0.1 s while r1
    leads (these only line the rest up in time: the shrunk schedule deleted the witness 26
    times, which since sim seed 3127 makes r2 wait instead of deciding at once; with the record
    kept, r2 is chained to r1 and decides at once as then); a rolling update makes r2 leader;
    the next Binding never reaches etcd; r2 decides gang j1 (2 x 1 GPU), j1-0's Binding is that
    one; etcd stalls and a store failover leaves r2 on the old master, so r2 is deposed and r3
    elected; j1-1 is deleted (the gang can no longer be placed). The standby r2 kept j1-0
    BINDING on n1/0 for good (its snapshot's sums against the apiserver's, at the quiet)."""
    past_first_wait(m)  # r1's election settled: r2 is chained to it
    for _ in range(9):
        m.tick(0.1)
    m.handover()
    m.bind_fault("timeout")
    m.create_gang("j", 2, False)
    m.lag(0, "pending", 5.0)
    m.stall(20.0)
    m.failover(False, 5.0)
    m.lag(0, "pending", 5.0)
    m.tick(16.0)
    m.delete_pod(1, False)
    m.quiesce()


def deposed_unsettled_held(m: SimMachine) -> None:
    """Soak seed 380 (its shrunk schedule): etcd stalls for 20 s and the next witness read is
    refused; gang j1 (2 x 1 GPU) is created and r1, deciding it, is killed with both Bindings
    stalled; r3 is elected, holds both where r1 decided (unsettled) and is deposed at once (r2
    elected); j1-0 is deleted, then etcd answers and r1's Binding of j1-1 lands. The standby r3
    kept j1-0 unsettled on n1/0 for good: the pending watch's DELETED says "bound or deleted",
    and the re-read that tells them apart is a leader's (its snapshot's sums against the
    apiserver's, at the quiet)."""
    m.quiesce()
    m.stall(20.0)
    m.witness_fault("read", 0.0)
    m.create_gang("j", 2, False)
    m.kill()
    m.tick(16.0)
    m.delete_pod(0, False)
    m.quiesce()


def inherited_pending_reloaded(m: SimMachine) -> None:
    """Issue 30 bug 7c: as 30.2, but standby r2's pending watch lags: a is not in r2's book at
    its election, only in the store (r1's reservation), so r2 inherits the record and re-reads
    a: pending. Decided afresh at once, a goes to n1 and c to n2/0,1; r1's Binding of a lands
    on n2/1."""
    m.create_pod("b", 1, False)
    m.create_pod("e", 1, False)
    m.create_pod("d", 1, False)
    for _ in range(4):
        m.tick(16.0)
    m.tick(5.0)
    m.tick(5.0)  # the first leader's wait ends: b, e, d bound
    m.lag(1, "pending", 20.0)
    for fault in ("slow", "500", "500", "slow", "timeout", "timeout"):
        m.bind_fault(fault)
    m.create_pod("a", 1, False)
    m.tick(0.5)
    m.handover()
    m.delete_pod(1, False)  # b
    m.delete_pod(1, False)  # d
    m.create_pod("c", 2, False)
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()


def fill(m: SimMachine) -> None:
    """b (2 GPUs) on n1 and d on n2/0, past the first leader's wait: n2/1 is the last free GPU."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)


def relist_frees_in_flight_bind(m: SimMachine) -> None:
    """Issue 12 bug 1: the leader's bound watch re-lists (the LIST taken now, delivered when the
    lagging stream catches up) while a's first Binding is refused; a is bound by the retry;
    the LIST's end, which lacks a, must not free it (c would get its GPU)."""
    fill(m)
    m.lag(0, "bound", 5.0)
    m.bind_fault("500")  # a is bound half a second late: after the LIST was taken
    m.create_pod("a", 1, False)
    m.relist(0, "bound")
    m.reads_fail(10.0)  # the re-read of a's 201 (after the LIST began) waits past the LIST
    m.create_pod("c", 1, False)
    for _ in range(3):
        m.tick(5.0)
    m.quiesce()


def conflict_is_failure(m: SimMachine) -> None:
    """Issue 12 bug 2: a's Binding commits but is answered 409 while pod reads fail; counted as
    a failed bind, a's GPU goes to c before the (lagging) bound watch shows a bound."""
    fill(m)
    m.lag(0, "bound", 5.0)
    m.reads_fail(10.0)  # and no re-read tells either
    m.bind_fault("409")
    m.create_pod("a", 1, False)
    m.create_pod("c", 1, False)
    for _ in range(3):
        m.tick(5.0)
    m.quiesce()


def stale_news_trusted(m: SimMachine) -> None:
    """Issue 20 bug 2: a LIST taken before a was recreated (new UID) arrives after the pending
    watch told of the new a: news older than the book's must not be taken in."""
    m.create_pod("a", 1, False)
    m.create_pod("b", 2, False)
    past_first_wait(m)
    m.lag(0, "bound", 5.0)
    m.relist(0, "bound")
    m.recreate_pod(0, 1)
    m.create_pod("c", 1, False)
    for _ in range(3):
        m.tick(5.0)
    m.quiesce()


def nothing_inherited(m: SimMachine) -> None:
    """Issue 20 bug 3: standby r2's watches lag while leader r1 binds a; a handover makes r2
    leader: the store's record of a, a pod r2 has not seen, must be inherited, not freed."""
    fill(m)
    m.lag(1, "pending", 20.0)
    m.lag(1, "bound", 20.0)
    m.create_pod("a", 1, False)
    m.create_pod("c", 1, False)
    m.handover()
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()


def one_read_settles(m: SimMachine) -> None:
    """Issue 20 bug 4: a's Binding hangs in a slow apiserver (it commits 20 s later), the
    retries time out, the read-back says pending: that is no answer, and forgetting a's GPU
    there gives it to c."""
    fill(m)
    for fault in ("slow", "timeout", "timeout"):
        m.bind_fault(fault)
    m.create_pod("a", 1, False)
    m.tick(2.0)
    m.create_pod("c", 1, False)
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()


def landed_records_freed(m: SimMachine) -> None:
    """Sim seed 33: standby r2 saw a pending, then its watches lag; r1 binds a (its first two
    Bindings refused) while a rolling update drains it, and r3, started with a still pending,
    lags too. r3 is elected with a pending in its book: its election reconcile must not free
    a's bound record (``reserve_landed`` makes it a reservation again). A second rolling update
    makes r2 leader, a still pending in its book too: only the store's record keeps a's GPU
    from c."""
    fill(m)
    m.lag(1, "pending", 20.0)
    m.lag(1, "bound", 20.0)
    m.bind_fault("500")
    m.bind_fault("500")
    m.create_pod("a", 1, False)
    m.handover()
    m.lag(2, "pending", 20.0)
    m.lag(2, "bound", 20.0)
    m.create_pod("c", 1, False)
    m.tick(5.0)
    m.handover()
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()


def uncharge_clears_shared_bits(m: SimMachine) -> None:
    """Sim seed 2: standby r2's bound watch lags while x (n2/1) is deleted and y bound there; its
    re-list, taken once y is bound, is delivered after r2 leads (y inherited meanwhile, x still
    held): it charges y and frees x, missing. Freeing x must not clear the GPU y holds (c would
    get it). (A LIST taken before y's Binding landed is followed by y's own event, which
    charges y again and hides the damage.)"""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    m.create_pod("x", 1, False)
    past_first_wait(m)
    m.lag(1, "bound", 20.0)
    m.delete_pod(2, False)  # x
    m.create_pod("y", 1, False)
    m.tick(0.5)
    m.relist(1, "bound")
    m.handover()
    m.tick(16.0)
    m.tick(5.0)
    m.create_pod("c", 1, False)
    for _ in range(3):
        m.tick(5.0)
    m.quiesce()


def deleted_while_binding_held(m: SimMachine) -> None:
    """Issue 12 bug 6: a is deleted while its Binding hangs in a slow apiserver (the Binding then
    finds it gone): its GPU must be let go (c waits for it)."""
    fill(m)
    for fault in ("slow", "timeout", "timeout"):
        m.bind_fault(fault)
    m.create_pod("a", 1, False)
    m.tick(2.0)
    m.delete_pod(0, False)  # a
    m.create_pod("c", 1, False)
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()


def binding_not_fenced(m: SimMachine) -> None:
    """Issue 12 bug 3: the store unreachable for 12 s, leader r1's renewals fail and its lease
    runs down; when the store is back, r1 has less lease left than a request's timeout and
    must send no Binding. a's Binding, sent anyway, hangs in a slow apiserver (it commits 20 s
    later); r1 is killed, r2 takes the lease once it lapses (the store's history kept: no wait)
    and binds c; then r1's Binding of a lands: two leader terms' Bindings interleaved."""
    fill(m)
    m.delete_pod(1, False)  # d: n2 free for a and c
    m.store_fault(False, 12.0)
    m.tick(5.0)
    m.tick(5.0)
    m.tick(2.0)
    m.bind_fault("slow")
    m.create_pod("a", 1, False)
    m.tick(0.5)
    m.kill()
    m.create_pod("c", 1, False)
    for _ in range(8):
        m.tick(5.0)
    m.quiesce()


def no_wait_after_flush(m: SimMachine) -> None:
    """Issue 12 bug 3 (the wait): the epoch witness is deleted and leader r1's Binding of a
    (n2/1) hangs in a slow apiserver (it commits 20 s later); a FLUSHALL. r2 is elected on the
    flushed store with no leader recorded anywhere: it must wait until r1's Bindings cannot
    land (a lease plus bindCommitSeconds) before its first decision. Deciding at once, it gives
    c (2 GPUs, pending meanwhile) n2/0,1 as d ends, and r1's Binding of a lands on n2/1. (The
    witness kept: sim-flush-waits-one-lease.)"""
    _flush_under_a_late_binding(m, delete_witness=True)


def flush_waits_one_lease(m: SimMachine) -> None:
    """Sim: the same with the epoch witness kept (it names r1). r2 is elected on a store that
    lost every election and reservation: nothing holds n2/1 for a, so it must wait until r1's
    Bindings cannot land (a lease plus bindCommitSeconds). Waiting one lease only (as after a
    failover, whose store keeps the reservations), it binds c on n2/0,1 at 99.2 s, and r1's
    Binding of a lands on n2/1 at 103.4 s."""
    _flush_under_a_late_binding(m, delete_witness=False)


def _flush_under_a_late_binding(m: SimMachine, delete_witness: bool) -> None:
    """b (2 GPUs) and d taken, c (2 GPUs) waiting; r1's Binding of a is slow (it commits
    later than r1 waited), the store is flushed half a second after and d deleted: whoever
    leads next must not give a's GPU to c before a's Binding can no longer land."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    m.create_pod("c", 2, False)
    if delete_witness:
        m.delete_witness()
    m.bind_fault("slow")
    m.create_pod("a", 1, False)
    m.tick(0.5)
    m.flush_store()
    m.delete_pod(3, False)  # d
    for _ in range(8):
        m.tick(5.0)
    m.quiesce()


def reloaded_deleted_held(m: SimMachine) -> None:
    """Issue 12 bug 7: a's Bindings never reach etcd and a rolling update hands r1's
    reservation of a over to r2 (UNSETTLED). The store becomes unreachable, so r2's lease runs
    out just after bindCommitSeconds; the re-read that settles a meets failing reads and
    answers "pending" only once r2 has stopped leading: a is RELOADED, queued, but no longer
    taken at once. a is deleted then: its reservation must go (on main r2 lets it go; held, it
    stays in standby r2's snapshot, a GPU of a pod that no longer exists, for as long as r3
    leads). Since seed 380's fix r2 lets a go as it is deposed already (DEPOSED), so the mutant
    puts that holding back too."""
    fill(m)
    for _ in range(3):
        m.bind_fault("timeout")
    m.create_pod("a", 1, False)
    m.tick(0.5)
    m.handover()  # r2 elected 20 s later; a's reservation settles 60 s after that
    m.tick(16.0)
    m.tick(5.0)
    for _ in range(3):
        m.tick(16.0)
    m.tick(5.0)
    m.store_fault(False, 25.0)  # r2 renewed 4 s ago: its lease ends 5 s after a is re-read
    m.tick(5.0)
    m.reads_fail(10.0)  # from just before a's re-read until after r2's lease ended
    m.tick(5.0)
    m.tick(5.0)
    m.tick(2.0)
    m.delete_pod(0, False)  # a
    for _ in range(4):
        m.tick(5.0)  # the store answers again: r3 is elected
    m.quiesce()


def terminating_members_count(m: SimMachine) -> None:
    """Issue 30 bug 5: a restarted gang counts its terminating members as bound. a takes one of
    the four GPUs and PodGroup gang j1 (minMember 2) two; a JobSet restart leaves j1's members
    terminating (they hold their GPUs) and creates j2 of 2: one GPU is free, so j2 waits whole.
    Counting j1's members toward the minimum makes j2's "surplus", and j2-0 is bound alone."""
    m.create_pod("a", 1, False)
    m.create_gang("j", 2, True)
    past_first_wait(m)
    m.tick(2.0)
    m.restart_gang(0)
    m.tick(5.0)
    m.tick(5.0)
    m.safe()
    m.quiesce()


def bound_view_behind(m: SimMachine) -> None:
    """Sim seed 5: a restarted gang counted from a bound view older than its new members. a
    takes one of the four GPUs and PodGroup gang j1 (minMember 2) two; the leader's bound watch
    re-lists (its LIST taken now), then a JobSet restart leaves j1's members terminating and
    creates j2 of 2. The LIST, delivered with j2, still shows j1 running: counted, j1 made j2's
    members "surplus", and j2-0 was bound alone on the one free GPU."""
    m.create_pod("a", 1, False)
    m.create_gang("j", 2, True)
    past_first_wait(m)
    m.tick(2.1)  # the LIST taken half a watch period before the pump delivers it
    m.relist(0, "bound")
    m.restart_gang(0)
    m.tick(5.0)
    m.tick(5.0)
    m.safe()
    m.quiesce()


def gang_member_refused(m: SimMachine) -> None:
    """Sim seed 629: gang j1 (2) is decided whole on n1; j1-0's Binding commits (answered 409:
    read back, bound as we asked), j1-1's is refused 403 on every attempt. Gang k2 (3) waits
    for three GPUs meanwhile, two free. Letting j1-1's GPU go gives it to k2, and j1 stays at
    1 of its minimum 2 bound."""
    past_first_wait(m)
    m.bind_fault("409")
    for _ in range(3):
        m.bind_fault("403")
    m.create_gang("j", 2, False)
    m.create_gang("k", 3, False)
    for _ in range(3):
        m.tick(5.0)
    m.quiesce()


def gang_hold_lost_in_failover(m: SimMachine) -> None:
    """Sim seed 549: r3 decides gang j3 (2) whole on n2; j3-0's Binding commits (answered 409:
    read back, bound), j3-1's is refused 403 on every attempt, so r3 holds j3-1's GPU for the
    gang. That hold lives in r3's book and on the store master, which a failover (not
    chained) loses. The new leader reloads from the apiserver: j3 has 1 of 2 bound, and the
    older single pod a waits at the same priority. In PrioritySort order a takes the GPU and
    j3 stays below its minimum for good; a gang being completed goes first (queue.py)."""
    past_first_wait(m)
    m.create_gang("k", 2, True)
    m.create_gang("j", 2, True)
    m.tick(5.0)
    m.bind_fault("409")
    for _ in range(30):
        m.bind_fault("403")
    m.failover(False, 60.0)
    m.create_pod("a", 1, False)
    m.restart_gang(1)
    m.reap()
    m.tick(2.0)
    for _ in range(4):
        m.tick(16.0)
    m.quiesce()


def gang_hold_taken_by_higher_priority(m: SimMachine) -> None:
    """Soak seed 3118 (its shrunk schedule; seed 909 loses the hold to FLUSHALLs and a lost
    lease instead): k1 fills n1. The store fails over, a partition leaving the leader r2 on
    the old master, and the promoted one is flushed. r2 decides gang j2 (2) whole on n2;
    j2-1's Binding commits, j2-0's is refused 403, so r2 holds j2-0's GPU for the gang, in its
    book and on the old master only; p (high priority) comes and r2 is killed. r4, elected on
    the new master, reloads j2 at 1 of 2 bound with p waiting for the one free GPU. Were p
    decided first, it would take that GPU without preempting and j2 would stay below its
    minimum for good; j2-0 goes first (queue.py), and p preempts."""
    assert isinstance(m, FullMachine)  # high priority is a rule of the full world
    m.stall(2.0)
    for _ in range(9):
        m.delete_witness()
    m.kill()
    m.create_gang("k", 2, False)
    m.quiesce()
    m.bind_fault("403")
    m.create_high("p", 1, 0, "labels")
    m.delete_pod(2, True)
    m.failover(True, 5.0)
    m.flush_store()
    m.create_gang("j", 2, False)
    for _ in range(3):
        m.delete_witness()
    m.create_high("p", 1, 0, "labels")
    m.kill()
    m.quiesce()


def lapsed_write_forgotten(m: SimMachine) -> None:
    """Issue 30 bug 7b: a store write skipped while the local lease had lapsed asks for no
    reconcile. a and b are bound by r1; every store call then answers 25 s late. r1's renewals
    come back too late and the store's lease ends; a is deleted; r2's acquire, sent while the
    store is slow, is answered after its own local lease time: r2 holds epoch 2 but does not
    count as leading yet. Its election inherits r1's record of a (a pod its book does not
    know), reads a gone and releases the record: skipped, as r2 does not lead yet. r2 then
    leads on with no reconcile, and the store keeps a bound record of a pod that does not
    exist (seen only by the store check: every reader of it errs towards holding)."""
    m.create_pod("a", 1, False)
    m.create_pod("b", 1, False)
    past_first_wait(m)
    m.store_fault(True, 25.0)
    m.tick(2.0)
    m.delete_pod(0, False)
    for _ in range(3):
        m.tick(5.0)
    m.quiesce()


def unit_blocked_by_itself(m: SimMachine) -> None:
    """The e2e SIGKILL gang swap: b takes n1/0; gang j1 (3) is decided onto n2/0, n2/1, n1/1,
    j1-0's Binding commits (answered 409: read back, bound) and j1-1's and j1-2's never reach
    etcd; a rolling update hands the two over to r2 (RELOADED) and b is deleted. r2 binds c on
    n1/0 and decides j1-1 and j1-2 afresh onto n1/1 and n2/1: each takes the other's old GPU,
    which the store must not refuse (``invariants.own_refusals``). On the Redis store
    (``--redis``) it also found, with or without the mutant, r2's mark of j1-1 and j1-2 as bound
    landing inside a reconcile that named them pending (the Redis reconcile is several calls),
    whose free step keeps a pending record only while it is reserved: both were freed (freed=2),
    and the store check found j1-1 and j1-2 bound with no record. Marks now wait for a reconcile
    under way (storesync.py; tests/integration/test_issue30_reconcile_marks.py)."""
    m.create_pod("b", 1, False)
    past_first_wait(m)
    m.bind_fault("409")
    for _ in range(6):
        m.bind_fault("timeout")
    m.create_gang("j", 3, False)
    m.tick(0.5)
    m.handover()
    m.delete_pod(0, False)  # b
    m.create_pod("c", 1, False)
    for _ in range(6):
        m.tick(5.0)
    m.quiesce()  # the faults end: r2's reloaded pair is decided in the quiet
    m.safe()


def restore_after_binding_answered_late(m: SimMachine) -> None:
    """Sim seed 726 (and 1101, 1318): etcd is backed up before gang j1 exists; r1 binds j1-1
    (j1-0's Binding is refused 403) and etcd is restored from the backup while the Binding's
    answer is on its way: the watches re-list in the new era while j1-1 is binding, then the
    201 comes. Held assumed on it, j1-1 kept its GPU in r1's snapshot for good, a pod that no
    longer exists."""
    m.bind_fault("403")
    m.delete_witness()
    m.etcd_restore(False)
    m.quiesce()
    m.bind_fault("403")
    m.create_gang("j1", 2, False)
    m.etcd_restore(True)
    m.quiesce()


def list_of_the_era_begun_meanwhile(m: SimMachine) -> None:
    """Sim seed 1132: a is bound on n1/0; etcd is backed up; r1's bound watch lags when etcd
    is restored, so its bound LIST (asked for at the restore) arrives late, after the pending
    LIST began the new era and a was recreated (a new UID, pending) in it. Taken for another
    new era, that LIST's old a replaced the new one in r1's book, and the bound watch's
    deletion of the old a then emptied it: the new a stayed pending, with no reason, for good."""
    m.create_pod("a", 1, False)
    m.quiesce()
    m.etcd_restore(False)
    m.create_other("o1", "n1")
    m.lag(0, "bound", 5.0)
    m.etcd_restore(True)
    m.tick(0.5)
    m.recreate_pod(0, 1)
    m.quiesce()


def binding_failed_in_new_era(m: SimMachine) -> None:
    """Sim seeds 1148 and 1326: etcd is backed up; o1 and then c are created, and c's Binding
    waits in an etcd stall; etcd is restored from the backup (no o1, no c): the watches list
    the new era, and when the stall ends c's Binding is answered (c gone). Then r1's bound
    watch re-lists. Had the Binding's answer told the book c's version of the era before,
    that LIST, below it, began another era and waited for a pending LIST that never came: d,
    created then, pending for good with GPUs free and no reason written."""
    m.create_pod("a", 1, False)
    past_first_wait(m)
    m.etcd_restore(False)
    m.create_other("o1", "n2")
    m.stall(2.0)
    m.create_pod("c", 1, False)
    m.etcd_restore(True)
    m.tick(2.0)
    m.relist(0, "bound")
    m.create_pod("d", 1, False)
    m.quiesce()


def list_asked_after_era_list(m: SimMachine) -> None:
    """Sim seed 2977: r2's watches lag when etcd is restored, so both its LISTs of the restored
    history wait; its pending watch then re-lists (a 410) after gang j1 was created, past the
    newest version r2 had been told. r2's bound LIST comes first and begins the new era; its
    pending LIST, asked for after that one but not below the old newest, was taken for one of
    the era before: the wait went on for good, and r2, elected after r1's SIGKILL, never
    decided j1 (pending, GPUs free, no reason written)."""
    m.lag(1, "bound", 5.0)
    m.tick(0.2)
    m.etcd_restore(False)
    m.create_pod("a", 1, True)  # after the backup: r2 has been told a version it takes back
    m.lag(1, "pending", 5.0)
    m.tick(0.2)
    m.etcd_restore(True)
    m.tick(0.1)
    m.kill()
    m.create_gang("j", 2, False)
    m.relist(0, "pending")
    m.quiesce()


def era_begun_after_other_listed(m: SimMachine) -> None:
    """Sim seed 3873: r1's watches lag when etcd is restored, so both its LISTs of the restored
    history wait; gang j1 is created (past the newest version r1 had been told), and r1's bound
    watch re-lists (a 410). That LIST, asked for after the pending one, comes first: its version
    not below the book's, it begins nothing. Then the pending LIST, read at the restore, begins
    the new era, which waited for a bound LIST that never came (the bound watch goes on from
    the one it had): r1 never decided j1 (pending, GPUs free, no reason written)."""
    m.etcd_restore(False)
    m.create_other("o1", "n1")  # after the backup: r1 has been told a version it takes back
    m.tick(0.5)
    m.lag(0, "bound", 20.0)
    m.lag(0, "pending", 20.0)
    m.etcd_restore(True)
    m.create_gang("j", 2, False)
    m.relist(0, "bound")
    m.quiesce()


def nominee_gone(m: SimMachine) -> None:
    """Sim seed 4450: p (2 GPUs, high priority) binds on n1, c on n2, and gang h1 (3 x 1 GPU,
    high priority) waits, a and e (1 GPU) too. p is deleted: h1 preempts c, its nominations
    holding n1's two GPUs and one of n2's while c terminates, and a and e wait as
    unschedulable. h1-0 is deleted: one of n1's GPUs is held by no one, but nothing moved a
    or e: pending beside it until their unschedulable wait ran out (5 minutes)."""
    assert isinstance(m, FullMachine)  # preemption is a rule of the full world
    m.create_high("p", 2, 0, "")
    m.create_high("h", 1, 3, "labels")
    m.create_pod("c", 2, False)
    m.create_pod("a", 1, False)
    m.create_pod("e", 1, False)
    past_first_wait(m)
    m.tick(40.0)
    m.delete_pod(6, False)  # p (a, c, e, h1-0, h1-1, h1-2, p)
    m.tick(0.3)
    m.delete_pod(2, False)  # h1-0 (a, e, h1-0, h1-1, h1-2; c is terminating)
    m.tick(2.0)
    m.quiesce()


def gpus_freed_during_attempt(m: SimMachine) -> None:
    """Sim seed 1541: the cluster is full (a on n1, b and c on n2); the store answers 3 s late;
    p (2 GPUs, high priority) finds no place and preempts, and its nominations wait for the
    store; meanwhile the store becomes unreachable (the write fails: "postponed") and a
    finishes. The GPUs a freed moved every waiting pod, but p's attempt was under way: parked
    unschedulable after it, p waited 5 minutes beside 2 free GPUs."""
    assert isinstance(m, FullMachine)  # preemption is a rule of the full world
    m.create_pod("a", 2, False)
    m.create_pod("b", 1, False)
    m.create_pod("c", 1, False)
    past_first_wait(m)
    m.store_fault(True, 3.0)
    m.create_high("p", 2, 0, "")
    m.store_fault(False, 12.0)
    m.finish_pod(0)  # a
    m.tick(5.0)
    m.quiesce()


def reloaded_nomination_unset(m: SimMachine) -> None:
    """Sim seed 3163: p, e and gang j1 fill the cluster; the store answers 3 s late; gang h2
    (high priority) preempts j1, and its nominations wait for the store; h2-1 is deleted and a
    rolling update hands r2 over to r4 before r2 set h2-0's nominatedNodeName or evicted j1.
    r4 reloads h2-0's nomination and evicts j1; had it not set h2-0's nominatedNodeName, the
    GPU held for h2-0 kept c (2 GPUs, lower priority) off n2 once j1 ended, for the
    nomination's hold, with no one shown nominated there."""
    assert isinstance(m, FullMachine)  # preemption is a rule of the full world
    m.create_pod("e", 1, False)
    m.tick(0.5)
    m.tick(0.5)
    m.handover()
    m.create_gang("j", 2, False)
    m.tick(0.5)
    m.create_high("p", 1, 0, "labels")
    m.create_pod("a", 1, False)
    m.tick(2.0)
    m.create_pod("c", 1, True)
    m.quiesce()
    m.store_fault(True, 3.0)
    m.create_high("p", 1, 2, "labels")
    m.delete_pod(0, False)  # a
    m.recreate_pod(0, 1)  # c
    m.tick(0.5)
    m.delete_pod(3, False)  # h2-1
    m.recreate_pod(0, 2)  # c
    m.handover()
    m.quiesce()


def victim_binding_in_flight(m: SimMachine) -> None:
    """Soak seed 909 (on e0b9be5, its shrunk schedule's end): a holds n1; etcd stalls, d is
    decided onto n2/0 and its Binding waits in the stall; p (2 GPUs, high priority) preempts d,
    whose eviction makes it terminating; when etcd answers, d's Binding must not land on the
    GPU p's nomination holds (the apiserver's BindingREST refuses a pod being deleted, 409)."""
    assert isinstance(m, FullMachine)  # preemption is a rule of the full world
    m.create_pod("a", 2, False)
    past_first_wait(m)
    m.stall(2.0)
    m.create_pod("d", 1, False)
    m.create_high("p", 2, 0, "")
    m.tick(5.0)
    m.tick(60.0)
    m.safe()


def restore_undoes_gang_bind(m: SimMachine) -> None:
    """Soak seed 870: gang k1 (2 x 1 GPU) waits for room; the next Binding commits but is
    answered 500; a finishes while the store answers late, and etcd is backed up; the leader
    binds k1 (k1-0's answer the 500, k1-1's a 201, their answers still on the way back) and
    etcd is restored from the backup before the watches delivered the Bindings' events: the
    LISTs of the restored history are at the newest version the book had been told (no new
    era), and the bound LIST ends while k1 is binding. The 201 that comes after must not
    leave k1-1 on the GPU the apiserver no longer shows it on."""
    m.create_pod("a", 2, False)
    m.create_pod("b", 2, False)
    past_first_wait(m)
    m.create_gang("k", 2, True)
    m.tick(30.0)
    m.bind_fault("500-committed")
    m.store_fault(True, 0.3)
    m.finish_pod(0)
    m.etcd_restore(False)
    m.tick(2.3)
    m.etcd_restore(True)
    m.tick(5.0)
    m.quiesce()
    m.safe()


def store_between_eras(m: SimMachine) -> None:
    """Sim seed 603: a is bound on n1/0; etcd is backed up; a is deleted (its record released)
    and b bound on its GPU; standby r2's bound watch lags when r1 hands over and etcd is
    restored (a bound again, b gone). r2's pending LIST begins the new era, r2 is elected and
    its election's reconcile writes the bound view of the era before (b, not a); then its bound
    LIST brings a back, which writes nothing. With the reconcile asked for when the era began,
    the election's was it, and the store had no record of a for good."""
    m.create_pod("a", 1, False)
    m.quiesce()
    m.etcd_restore(False)
    m.delete_pod(0, False)
    m.create_pod("b", 1, False)
    m.tick(1.0)
    m.lag(1, "bound", 20.0)
    m.handover()
    m.etcd_restore(True)
    m.tick(3.0)
    m.quiesce()


def restore_under_a_stalled_binding(m: SimMachine) -> None:
    """Soak seed 3090: gang j1 holds n1/0,1 and n2/0; p (2 GPUs, high priority) preempts j1;
    etcd stalls (after the evictions: an eviction is a write, which a stall holds back) and is
    backed up (j1 terminating); j1 ends, p is decided onto n1/0,1 and its Binding waits in the
    stall; etcd is restored from the backup (j1 back on its GPUs) and
    the waiting write fails. The next re-send of p's Binding, decided in the era before, landed
    p on n1/0,1 beside j1-0 and j1-1: a decision of a view gone is read back, not re-sent."""
    assert isinstance(m, FullMachine)  # preemption is a rule of the full world
    past_first_wait(m)
    m.create_gang("j1", 3, False)
    m.create_high("p", 2, 0, "")
    m.tick(0.5)
    m.stall(2.0)
    m.etcd_restore(False)
    m.reap()
    m.tick(0.5)
    m.etcd_restore(True)
    for _ in range(4):
        m.tick(0.5)
    m.quiesce()


def s_waits_behind_a_backed_up(m: SimMachine) -> None:
    """a holds n2/1, the last GPU (``fill``), s waits for it, and etcd is backed up."""
    fill(m)
    m.create_pod("a", 1, False)
    m.tick(0.5)
    m.create_pod("s", 1, False)
    m.tick(0.5)
    m.etcd_restore(False)


def restore_before_the_binding(m: SimMachine) -> None:
    """Soak seed 5205: a holds n2/1, the last GPU, and s waits; etcd is backed up; a is
    deleted, and s is decided onto n2/1. etcd is restored from the backup (a bound on n2/1
    again) before s's Binding goes out: every watch breaks and asks for a LIST. Sent at once,
    before the LISTs could begin the new era, the Binding landed s beside a; it waits for the
    LISTs, and decided in the era before, it is never sent."""
    s_waits_behind_a_backed_up(m)
    m.delete_pod(0, False)  # a: the first pod by name
    m.tick(0.1)
    m.etcd_restore(True)
    for _ in range(4):
        m.tick(0.5)
    m.quiesce()


def restore_under_a_slow_binding(m: SimMachine) -> None:
    """Soak seeds 40428 and 40700: a holds n2/1, the last GPU, and s waits; etcd is backed up;
    a is deleted, s is decided onto n2/1 and its Binding hangs in a slow apiserver (it commits
    20 s after it was sent). etcd is restored from the backup: a bound on n2/1 again. A restore
    stops every apiserver first, so the request fails; left to commit, it landed s beside a
    (the world's fault, not the scheduler's: nothing it sends can call back a request)."""
    s_waits_behind_a_backed_up(m)
    m.bind_fault("slow")
    m.delete_pod(0, False)  # a: the first pod by name
    m.tick(2.0)
    m.etcd_restore(True)
    for _ in range(4):
        m.tick(10.0)
    m.quiesce()


def restore_while_reserving(m: SimMachine) -> None:
    """Soak seed 30598: b (2 GPUs), d, a and c are created during the first leader's wait and
    etcd is backed up then (every pod pending, no reason shown); past the wait b, d and a take
    the four GPUs and c is refused, its reason written. The store answers 3 s late; a is
    deleted and c decided onto n2/1, its reservation waiting for the store. etcd is restored
    from the backup (every pod pending again, c without a reason: news of a pod being
    reserved), then the store goes down and the reservation fails. Decided again after b, d and
    a, c is refused again and must show its reason: read for what it shows only while pending,
    its news held the reason as written, and the same reason decided again was never
    written."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    m.create_pod("a", 1, False)
    m.create_pod("c", 1, False)
    m.etcd_restore(False)
    past_first_wait(m)
    m.store_fault(True, 3.0)
    m.delete_pod(0, False)  # a: the first pod by name
    m.tick(0.5)
    m.etcd_restore(True)
    m.store_fault(False, 3.0)
    for _ in range(6):
        m.tick(10.0)
    m.quiesce()


def pod_group_lowered_under_a_partial_gang(m: SimMachine) -> None:
    """Soak seed 5963: gang h1 of 3 (an upstream PodGroup, minCount 3): h1-1 and h1-2 are
    bound, h1-0's Binding is refused (500) and r1 is killed before its retry. The job is scaled
    down: h1-2 deleted and the PodGroup replaced with minCount 2. The next leader decides h1-0
    afresh; h1-1's holding kept the minimum 3 it was charged with, which disagreed with h1-0's
    2, and the gang waited for good below its new minimum beside free GPUs. A PodGroup's
    minimum is read as it is now for the bound members too."""
    assert isinstance(m, FullMachine)  # the other gang sources are rules of the full world
    past_first_wait(m)
    m.bind_fault("500")
    m.create_gang_from("h", 3, "upstream PodGroup")
    m.tick(0.1)
    m.kill()
    m.shrink_gang(0, 1, True)
    m.reap()
    for _ in range(4):
        m.tick(16.0)
    m.quiesce()


def own_binding_after_flush(m: SimMachine) -> None:
    """Sim seed 3348: r1's Binding of p hangs in a slow apiserver (abandoned at the bind
    timeout, p stays binding: it is re-sent while r1 leads); FLUSHALL. r2 wins the lease on the
    flushed store (not chained: it waits) and records itself in the witness; r1's renewal
    fails. A rolling update ends r2's term (SIGTERM gives the lease back), and r1, retrying
    first, is elected on the same store chained to r2 (no wait, so no reconcile before its
    first decision). Its re-sent Binding lands, and its mark finds no reservation to mark: p is
    bound on n1/0 with no store record (its own in-flight reservation, which the FLUSHALL lost,
    was not written again at the election). The seed's shrunk steps placed the elections by
    deleting the witness, which no longer chains an election since sim seed 3127."""
    past_first_wait(m)
    m.bind_fault("slow")
    m.create_pod("p", 1, False)
    m.tick(0.5)
    m.flush_store()
    m.tick(2.0)
    m.tick(2.0)
    m.handover()
    m.tick(16.0)
    m.quiesce()


def chained_to_a_leader_in_its_wait(m: SimMachine) -> None:
    """Sim seed 836: r1's Binding of a hangs in a slow apiserver (it commits 20 s later), d is
    deleted (n2 has two GPUs free but for a's Binding), r1 is killed and the store flushed
    (a's reservation gone); p (2 GPUs, high priority: decided first) comes. r2 wins the lease
    on the flushed store: its history is cut, it waits one lease plus bindCommitSeconds. A
    rolling update ends r2's term in that wait (SIGTERM: the lease handed over) and r3 is
    elected chained to r2's record. Skipping the wait there, it binds p on n2/0,1, and a's
    Binding lands on n2/1 too; chained only to a settled election, it waits r2's wait in
    full."""
    _flush_then_handover(m)


def _flush_then_handover(m: SimMachine) -> None:
    assert isinstance(m, FullMachine)  # pods of high priority are a rule of the full world
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    m.bind_fault("slow")
    m.create_pod("a", 1, False)
    m.delete_pod(2, False)  # d (of a, b, d)
    m.tick(1.0)
    m.kill()  # r1: its Binding of a stays in the slow apiserver; r3 starts
    m.flush_store()
    m.create_high("p", 2, 0, "labels")
    m.tick(2.0)  # r2 takes the lease (its next try)
    m.handover()  # r4 starts, r2 gets SIGTERM
    for _ in range(8):
        m.tick(5.0)
    m.quiesce()


def deposed_inherited_held(m: SimMachine) -> None:
    """Sim seed 3935: gang h1 (3 x 1 GPU) is bound after an etcd backup; h1-0 and h1-2 finish
    (their records released), so the store keeps h1-1's record alone. Every witness read is
    refused for 20 s: r1's renewals fail, and the replicas take the lease in turns, each giving
    it up at once (the witness cannot confirm its epoch). r2's pending watch lags; etcd is
    restored from the backup (the gang pending again, h1-1's record kept) and stalls; p (2 GPU)
    comes. r2, elected, inherits h1-1's record (its bound re-list lacked h1-1, its pending watch
    has not shown it) and re-reads h1-1 under the stall, and gives the lease up before the read
    answers: pending. The standby r2 made h1-1 unsettled, held on n1/1 for good, while r1 leads
    on, binds p on n2, and the gang, short of a GPU, waits."""
    assert isinstance(m, FullMachine)  # pods of high priority are a rule of the full world
    m.create_high("h", 1, 3, "labels")
    m.etcd_restore(False)
    past_first_wait(m)
    m.finish_pod(0)
    m.finish_pod(1)
    m.witness_fault("read", 20.0)
    m.tick(16.0)
    m.lag(1, "pending", 20.0)
    m.etcd_restore(True)
    m.stall(8.0)
    m.create_high("p", 2, 0, "")
    m.tick(0.5)
    m.quiesce()


def victim_back_after_restore(m: SimMachine) -> None:
    """Soak seed 1326: d holds one node; the store answers 3 s late; gang h3 (3 x 1 GPU, high
    priority) needs one of d's GPUs and preempts d, its nominations waiting for the store;
    etcd is backed up (h3 pending, d running). The nominations land, d is evicted; etcd is
    restored from the backup: d running again, h3 with no nominatedNodeName. a (1 GPU) comes.
    Kept waiting for d, which never leaves, h3's nomination held the free node's GPUs from a
    for its whole hold (5 minutes): a pending beside 2 free GPUs. A victim back in a later era
    ends the nomination, and h3 preempts d again."""
    assert isinstance(m, FullMachine)  # preemption is a rule of the full world
    m.create_pod("d", 2, False)
    past_first_wait(m)
    m.store_fault(True, 3.0)
    m.create_high("h", 1, 3, "labels")
    m.etcd_restore(False)
    m.tick(5.0)
    m.tick(5.0)
    m.etcd_restore(True)
    m.create_pod("a", 2, False)
    m.tick(2.0)
    m.quiesce()


def gone_before_restore(m: SimMachine) -> None:
    """Soak seed 1326 (once its nomination bug was fixed): r2 leads; gang j2 is decided again
    after an etcd restore, j2-1 deleted meanwhile: its Binding is answered 404, while j2-0's
    (its answer lost, then re-sent into a 30 s etcd stall) holds the gang's outcomes. etcd is
    restored twice more from a backup that has j2-1 pending (the same UID), and r2's LISTs of
    the new eras show it while it is binding. Told "gone" after that, r2's book let j2-1 go
    for good: pending, with no reason written. The steps are the shrunk seed's."""
    m.relist(stream="pending", which=0)
    m.etcd_restore(restore=True)
    m.create_gang(job="k", podgroup=True, size=2)
    m.delete_pod(graceful=False, index=83)
    m.reads_fail(seconds=1.0)
    m.recreate_pod(gpus=2, index=38)
    m.quiesce()
    m.stall(seconds=20.0)
    m.bind_fault(kind="403")
    m.bind_fault(kind="403")
    m.create_pod(claim=True, gpus=2, name="a")
    m.relist(stream="pending", which=0)
    m.create_pod(claim=True, gpus=1, name="c")
    m.failover(lost=False, partition=0.0)
    m.tick(seconds=16.0)
    m.tick(seconds=2.0)
    m.failover(lost=False, partition=5.0)
    m.delete_pod(graceful=False, index=48)
    m.tick(seconds=2.0)
    m.tick(seconds=5.0)
    m.recreate_pod(gpus=2, index=15)
    m.create_gang(job="j", podgroup=True, size=2)
    m.recreate_pod(gpus=2, index=57)
    m.delete_pod(graceful=False, index=99)
    m.reap()
    m.failover(lost=False, partition=0.0)
    m.reads_fail(seconds=10.0)
    m.etcd_restore(restore=False)
    m.stall(seconds=30.0)
    m.bind_fault(kind="slow")
    m.create_pod(claim=False, gpus=2, name="d")
    m.reads_fail(seconds=1.0)
    m.recreate_pod(gpus=1, index=69)
    m.failover(lost=False, partition=20.0)
    m.reap()
    m.tick(seconds=2.0)
    m.quiesce()
    m.delete_pod(graceful=False, index=9)
    m.create_pod(claim=True, gpus=2, name="b")
    m.bind_fault(kind="lose")
    m.reap()
    m.relist(stream="pending", which=0)
    m.bind_fault(kind="lose")
    m.bind_fault(kind="500-committed")
    m.tick(seconds=2.0)
    m.etcd_restore(restore=True)
    m.delete_pod(graceful=False, index=59)
    m.reap()
    m.delete_pod(graceful=True, index=96)
    m.failover(lost=True, partition=20.0)
    m.reap()
    m.stall(seconds=30.0)
    m.bind_fault(kind="409")
    m.etcd_restore(restore=True)
    m.reads_fail(seconds=10.0)
    m.reads_fail(seconds=10.0)
    m.delete_pod(graceful=True, index=98)
    m.recreate_pod(gpus=2, index=42)
    m.etcd_restore(restore=True)
    m.create_pod(claim=True, gpus=1, name="b")
    m.quiesce()


def partition_electing_without_record(m: SimMachine) -> None:
    """Soak seed 3127 (its shrunk steps): etcd stalls; the epoch witness ConfigMap is deleted
    again and again; a, b and gang j1 come while the store fails over and a partition keeps r1
    on the old master for 60 s. r2 is elected on the promoted replica; a is deleted, c (2 GPU)
    comes, etcd is backed up, b recreated, the witness deleted again and etcd restored: r1 and
    r2 are elected at once on the two sides, each finding no witness record. Counted as
    chained, neither waited, and when etcd answered both bound: c on n2/0,1 by r2 and j1 on
    n2/0 and n2/1 by r1. Chained only to the record its compare-and-swap replaced, an election
    finding none waits out the other side's Bindings."""
    m.stall(30.0)
    for _ in range(14):
        m.delete_witness()
    m.create_pod("a", 1, False)
    m.create_pod("b", 1, False)
    m.failover(False, 60.0)
    m.create_gang("j1", 2, False)
    m.tick(16.0)
    for _ in range(5):
        m.delete_witness()
    m.delete_pod(0, False)
    m.create_pod("c", 2, False)
    m.lag(0, "pending", 5.0)
    m.etcd_restore(False)
    m.recreate_pod(0, 1)
    m.delete_witness()
    m.etcd_restore(True)
    m.tick(16.0)
    m.quiesce()


def shares_over_committed(m: SimMachine) -> None:
    """Shares of one card: b and d leave one card free (n2/1); s takes 70% of it; t asks for
    70% too and must wait, and so must c (1 GPU): the card is shared. A snapshot that does not
    read s's shares back from its annotation gives t the card as well (140%), then c the card
    whole: ``invariants.shared_gpus``."""
    assert isinstance(m, FullMachine)  # shares are a rule of the full world
    m.create_pod("b", 2, False)
    m.create_pod("d", 1, False)
    past_first_wait(m)
    m.create_shared("s", 70, 8, 1)
    m.tick(5.0)
    m.create_shared("t", 70, 0, 1)
    m.tick(5.0)
    m.safe()
    m.create_pod("c", 1, False)
    m.tick(5.0)
    m.safe()
    m.quiesce()


def relist_version_untold(m: SimMachine) -> None:
    """Soak seed 2557: b (n1/0,1) and d (n2/0,1) bound, a waits; etcd is backed up and stalls.
    b is deleted while r1's bound watch lags, and the watch re-lists (410 Gone) before it told
    that: its LIST, at the deletion's version, lacks b. a is decided onto n1 and its Binding
    waits in the stall; etcd is restored from the backup (b back on n1/0,1), the Binding fails
    and is retried. The restored LISTs are at the backup's version, below the re-list's: a new
    era, so the retry is stale and not sent. With the re-list's version untold, the book's
    newest was the backup's, no era began, and a landed on n1/0 beside b."""
    m.create_pod("b", 2, False)
    m.create_pod("d", 2, False)
    past_first_wait(m)
    m.create_pod("a", 1, False)
    m.tick(5.0)
    m.etcd_restore(False)
    m.stall(20.0)
    m.lag(0, "bound", 5.0)
    m.delete_pod(1, False)  # b (of a, b, d)
    m.relist(0, "bound")
    m.tick(5.0)
    m.tick(2.0)
    m.etcd_restore(True)
    m.tick(2.0)
    m.quiesce()


def finished_pod_read_back(m: SimMachine) -> None:
    """Soak seed 1992: a and c take every GPU; b (2 GPU) waits. r1's pending watch re-lists
    (410) and lags: its LIST, b pending in it, is in transit. a succeeds, b is bound on a's
    GPUs and succeeds; r1's bound watch shows b bound and finished (b leaves the book, and its
    version with it). The LIST arrives: b is pending again and decided again, its Binding gets
    409, the read-back finds it bound as r1 asked, and finished. Taken as bound, b was held as
    assumed for good: its GPUs taken in r1's snapshot, its record bound in the store."""
    m.create_pod("a", 2, False)
    m.create_pod("c", 2, False)
    past_first_wait(m)
    m.create_pod("b", 2, False)
    m.tick(2.0)
    m.relist(0, "pending")
    m.lag(0, "pending", 5.0)
    m.finish_pod(0)  # a: b is bound on its GPUs
    m.tick(0.5)
    m.finish_pod(0)  # b
    m.tick(2.0)
    m.quiesce()


def restore_unbinds_under_pending_news(m: SimMachine) -> None:
    """Soak seed 3260 (its shrunk steps, the last two as time passing): gang h1 (high priority)
    is bound on n2 and restarted: h2 waits for h1's members to end, and etcd is backed up
    before r1 writes h2's nomination. h1 ends and h2 is bound on n2. r2's bound watch lags
    when etcd is restored from the backup (h1 back terminating, h2 pending): r2's pending LIST
    begins the new era, and r1, deciding h2 again, writes its nomination, which r2's pending
    watch tells, newer than r2's bound LIST taken at the restore. That LIST lacks h2: taking
    the pending watch's news for news of h2 bound after it, r2 held h2 bound on n2 for good,
    beside h1. (The witness deleted first re-elects r1 at 15 s, which times r1's turns so.)"""
    assert isinstance(m, FullMachine)  # pods of high priority are a rule of the full world
    m.delete_witness()
    m.create_pod("a", 1, False)
    m.quiesce()
    m.create_high("p", 1, 2, "labels")
    m.restart_gang(0)
    m.etcd_restore(False)
    m.quiesce()
    m.lag(1, "bound", 5.0)
    m.etcd_restore(True)
    m.tick(2.0)
    m.quiesce()


def reason_written_to_a_deleted_pod(m: SimMachine) -> None:
    """Soak seed 11867, shrunk: gang j's j1-0 deleted, a backup holding j1-1 pending, the gang
    restarted. A restore brings j1-1 back and r1 writes its reason while j1-1 is deleted
    again (the write answered 404), and a second restore from the same backup brings it back
    once more. Held as written, the reason was never written: j1-1 pending without one. The
    witness deletions only let the time pass that puts the write after the delete."""
    for _ in range(51):
        m.delete_witness()
    m.create_gang(job="j", size=2, podgroup=False)
    m.delete_pod(index=0, graceful=False)
    m.etcd_restore(restore=False)
    m.restart_gang(index=0)
    m.quiesce()
    m.etcd_restore(restore=True)
    m.delete_pod(index=0, graceful=False)
    m.etcd_restore(restore=True)
    m.quiesce()


def surplus_beside_bindings_in_flight(m: SimMachine) -> None:
    """Soak seed 11505, as a timeline of its own: in an etcd stall, PodGroup gang j (minimum 3)
    is decided (its Bindings wait in the stall), gang k of 2 waits for the GPU left, and j is
    restarted (j1 deleted, j3 created) before the Bindings are answered. Counting j1's
    assumed members as bound, r1 bound j3-0 alone as surplus on the free GPU; j1's Bindings
    then failed (gone), k2 took the GPUs they held, and gang j stayed 1 of 3 bound for good."""
    m.quiesce()
    m.stall(seconds=20.0)
    m.create_gang(job="j", size=3, podgroup=True)
    m.create_gang(job="k", size=2, podgroup=False)
    m.restart_gang(index=0)
    m.tick(seconds=0.5)
    m.quiesce()


def restored_binding_shows_no_reason(m: SimMachine) -> None:
    """Soak seed 25470, shrunk: gang j of 2 waits (written: its reason) behind p and gang h of
    high priority; p succeeds and j is bound; an etcd restore from a backup taken before any
    reason was written puts j back to pending, without a reason, behind p and h again. The
    re-read of each assumed member found it pending; held as written since before its
    Binding, the same reason decided again was never written: j pending without one."""
    m.delete_witness()
    m.create_high(name="p", gpus=1, gang=0, source="labels")
    m.create_gang(job="j", size=2, podgroup=False)
    m.stall(seconds=2.0)
    m.create_high(name="q", gpus=1, gang=2, source="labels")
    m.etcd_restore(restore=False)
    m.quiesce()
    m.finish_pod(index=2)  # p, the third bound pod by name (after h2-0 and h2-1)
    m.delete_witness()
    m.etcd_restore(restore=True)
    m.quiesce()


def gang_member_gone_while_refused(m: SimMachine) -> None:
    """Soak seed 35133: gang h1 (2, priority 1000) is decided while a holds a GPU; its
    Bindings are refused 403 on every attempt, and the gang restarts meanwhile (h1's members
    deleted, gang h2 of 2 created); share u waits for two cards of one node. The book has h1's
    members pending again (refused after the pending watch said they left) until a read says
    they are gone. Decided with h2's members before that read answered, the plan placed the
    ghosts and h2-0, and preempted a: the ghosts' Bindings found them gone, u took the cards
    they left, and h2 was 1 of its minimum 2 bound while a terminated."""
    past_first_wait(m)
    m.create_pod("a", 1, False)
    m.tick(2.0)
    for _ in range(6):
        m.bind_fault("403")
    m._create_gang("h", 2, "PodGroup", 1000)
    m.tick(0.5)
    m.create_shared("u", 30, 0, 2)
    m.restart_gang(0)
    for _ in range(4):
        m.tick(5.0)
    m.quiesce()


def outcome_of_an_earlier_decision(m: SimMachine) -> None:
    """Soak seed 51148, shrunk: Kueue gangs j1 and k2 (2 each) are created during the first
    leader's wait and etcd is backed up; p (high priority) comes, and both gangs are scaled
    down to 1 (j1-1 and k2-1 deleted). Past the wait, j1-0 is decided onto n1/1 and its
    Binding commits but is answered 500; its retries are refused 403, the binder waiting
    between them. etcd is restored from the backup (both gangs of 2 again, j1-0 pending): j1
    is decided afresh, j1-0 onto n1/1 again, and its new Bindings are refused twice. Then the
    first Binding's last retry, of the era before, fails: told to the book as the new
    decision's, that refusal forgot n1/1 while the new Binding was still being sent; k2 was
    decided onto it, and both j1-0 and k2-1 were bound on n1/1."""
    m.tick(16.1)
    m.tick(0.5)
    m.create_gang_from("j", 2, "Kueue")
    m.tick(0.2)
    m.create_gang_from("k", 2, "Kueue")
    m.tick(0.2)
    m.etcd_restore(False)
    m.tick(5.0)
    m.bind_fault("403")
    m.tick(0.5)
    m.bind_fault("500-committed")
    m.tick(16.0)
    m.create_high("p", 1, 0, "labels")
    m.tick(16.0)
    m.shrink_gang(2, 1, True)  # k2: the third gang member by name
    m.bind_fault("403")
    m.shrink_gang(0, 1, True)  # j1
    m.bind_fault("403")
    m.tick(2.0)
    for _ in range(4):
        m.bind_fault("403")
    m.tick(0.3)
    m.bind_fault("403")
    m.tick(16.0)
    m.tick(0.5)
    for _ in range(4):
        m.bind_fault("403")
    m.etcd_restore(True)
    m.tick(2.0)
    m.quiesce()


def reserving_pod_left(m: SimMachine) -> None:
    """Soak seed 50161, shrunk: e (with a ResourceClaim) and a are bound on n1, j1-0 on n2;
    the store fails over and is flushed again and again while b is created, and etcd is backed
    up (b pending). b is bound on n2/1; gang h2 (high priority) preempts a, b and e, is scaled
    down and deleted, p (high priority) is bound on n1, and a rolling update makes r3 leader.
    The store answers 12 s late; p is recreated and gang h3 (high priority) created, decided at
    once, its reservation waiting for the store; etcd is restored from the backup (no h3, a
    and e bound on n1, b pending). The new era's pending LIST lacked h3's members, and the book
    held them reserving for the Binding's 404; the reservation then failed (the store failed
    over meanwhile), and h3's members were pending again in the book for good: the ghost gang
    preempted a and held n2/1 nominated while b waited beside it."""
    m.bind_fault("403")
    m.create_pod("e", 1, True)
    m.witness_fault("read", 0.0)
    m.create_pod("a", 1, False)
    m.reads_fail(1.0)
    m.quiesce()
    m.create_gang("j", 3, False)
    m.shrink_gang(0, 2, True)
    m.failover(False, 0.0)
    for _ in range(4):
        m.flush_store()
    m.create_pod("b", 1, False)
    m.flush_store()
    m.etcd_restore(False)
    m.tick(2.0)
    m.quiesce()
    m.create_high("p", 1, 3, "labels")  # gang h2 of 3
    m.bind_fault("403")
    m.tick(0.5)
    for _ in range(3):
        m.flush_store()
    m.shrink_gang(0, 1, True)  # h2: 3 -> 2, h2-2 deleted
    m.delete_pod(0, False)  # h2-0
    m.create_high("p", 2, 0, "labels")
    m.handover()
    m.quiesce()
    m.delete_pod(0, False)  # h2-1
    m.store_fault(True, 12.0)
    m.recreate_pod(0, 1)  # p
    m.create_high("p", 1, 2, "labels")  # gang h3 of 2
    m.store_fault(True, 3.0)
    m.etcd_restore(True)
    m.failover(False, 0.0)
    m.quiesce()


def release_over_reconcile(m: SimMachine) -> None:
    """Sim seed 1019, shrunk: gang k1 (a PodGroup of 2) is bound on n1 and etcd backed up; etcd
    is restored from that backup (k1 still bound), k1 is scaled down to 1 and k1-1 ends: its
    record's release is sent as the store starts answering 3 s late, and etcd is restored from
    the backup again, k1-1 bound again. The restore's reconcile wrote k1-1's record back; the
    release, sent before it, landed after it: k1-1 bound with no record. (The store is checked
    across etcd restores since this fix: ``machine._store_found``.)"""
    m.relist(0, "pending")
    m.bind_fault("403")
    m.store_fault(False, 3.0)
    m.kill()
    m.etcd_restore(False)
    m.create_shared("s", 30, 0, 1)
    m.bind_fault("403")
    m.quiesce()
    m.delete_pod(0, False)
    m.etcd_restore(False)
    m.tick(2.0)
    m.create_gang("k", 2, True)
    m.etcd_restore(False)
    m.relist(1, "pending")
    m.tick(5.0)
    m.create_gang("j", 2, False)
    m.delete_pod(1, True)
    m.create_shared("s", 30, 0, 1)
    m.quiesce()
    m.etcd_restore(True)
    m.bind_fault("403")
    m.shrink_gang(0, 1, True)  # k1: 2 -> 1, k1-1 deleted
    m.reap()
    m.store_fault(True, 3.0)
    m.etcd_restore(True)
    m.quiesce()


def reserved_under_release(m: SimMachine) -> None:
    """Sim seed 1019, unshrunk, once the release was ordered before a reconcile: gang j1 (2,
    labels) is created during r3's first wait and etcd backed up; past the wait j1 is bound on
    n1, and etcd is restored from the backup twice (j1 pending again), the store then
    answering 3 s late. Read back pending, j1 let its reservations go (the releases sent) and
    was decided again at once: its new reservations, sent while the releases were on their
    way, landed before them and were removed, and j1 was bound with no record."""
    m.relist(0, "pending")
    m.bind_fault("403")
    m.bind_fault("403")
    m.quiesce()
    m.relist(0, "pending")
    m.relist(0, "pending")
    m.kill()
    m.bind_fault("403")
    m.relist(1, "pending")
    m.create_gang("j", 2, False)
    m.bind_fault("403")
    m.etcd_restore(False)
    m.tick(16.0)
    m.create_pod("a", 1, False)
    m.etcd_restore(True)
    m.etcd_restore(False)
    m.etcd_restore(True)
    m.store_fault(True, 3.0)
    m.quiesce()


def restored_twice_from_one_backup(m: SimMachine) -> None:
    """Soak seed 56736, shrunk: gang j1 (2 x 1 GPU) runs on n2 and p (2 GPUs) on n1, which
    ends; d (1 GPU) and gang h2 (3 x 1 GPU, high priority) come, and etcd is backed up. h2
    preempts j1 and is bound with d. etcd is restored from the backup: a new era, h2 pending
    again preempts j1 again, its evictions answered; 0.2 s later etcd is restored again from
    the same backup, before the watches told the leader of any version the first restore's
    history reached: no new era, and j1 runs again. h2's nomination waited for j1 for good,
    holding n1's GPUs from d: d pending beside 2 free GPUs."""
    m.create_high("p", 2, 0, "labels")
    m.kill()
    m.create_gang("j", 2, False)
    m.quiesce()
    m.etcd_restore(False)
    m.failover(False, 0.0)
    m.kill()
    m.finish_pod(2)
    m.create_pod("d", 1, False)
    m.tick(0.5)
    m.tick(0.5)
    m.create_high("p", 1, 3, "labels")
    m.etcd_restore(False)
    m.quiesce()
    m.create_pod("a", 1, False)
    m.etcd_restore(True)
    m.create_pod("c", 1, False)
    m.etcd_restore(True)
    m.quiesce()


TIMELINES: dict[str, Callable[[SimMachine], None]] = {
    "sim1992-finished-pod-read-back": finished_pod_read_back,
    "sim3090-restore-under-a-stalled-binding": restore_under_a_stalled_binding,
    "sim5963-pod-group-lowered-under-a-partial-gang": pod_group_lowered_under_a_partial_gang,
    "sim5205-restore-before-the-binding": restore_before_the_binding,
    "sim40700-restore-under-a-slow-binding": restore_under_a_slow_binding,
    "e2e-unit-blocked-by-itself": unit_blocked_by_itself,
    "sim1132-list-of-the-era-begun-meanwhile": list_of_the_era_begun_meanwhile,
    "sim603-store-between-eras": store_between_eras,
    "sim726-restore-after-binding-answered-late": restore_after_binding_answered_late,
    "30.7b-lapsed-write-forgotten": lapsed_write_forgotten,
    "sim629-gang-member-refused": gang_member_refused,
    "sim549-gang-hold-lost-in-failover": gang_hold_lost_in_failover,
    "sim909-gang-hold-taken-by-higher-priority": gang_hold_taken_by_higher_priority,
    "30.5-terminating-members-count": terminating_members_count,
    "sim5-bound-view-behind": bound_view_behind,
    "30.3-inheritance-by-name": inheritance_by_name,
    "30.4-witness-off-after-403": witness_off_after_403,
    "30.1a-claim-write-fail-forgets": claim_write_fail_forgets,
    "30.1b-checked-bound-ignored": checked_bound_ignored,
    "30.1-checked-pending-forgets": checked_pending_forgets,
    "30.1-no-unreserve": no_unreserve,
    "30.2-reload-decided-at-once": reload_decided_at_once,
    "sim691-deposed-binding-held": deposed_binding_held,
    "sim380-deposed-unsettled-held": deposed_unsettled_held,
    "30.7c-inherited-pending-reloaded": inherited_pending_reloaded,
    "12.1-relist-frees-in-flight-bind": relist_frees_in_flight_bind,
    "12.2-409-counted-as-failed": conflict_is_failure,
    "20.2-stale-news-trusted": stale_news_trusted,
    "20.3-nothing-inherited": nothing_inherited,
    "20.4-one-read-settles": one_read_settles,
    "sim33-landed-records-freed": landed_records_freed,
    "sim2-uncharge-clears-shared-bits": uncharge_clears_shared_bits,
    "12.6-deleted-while-binding-held": deleted_while_binding_held,
    "12.3-binding-not-fenced": binding_not_fenced,
    "12.3-no-wait-after-flush": no_wait_after_flush,
    "sim-flush-waits-one-lease": flush_waits_one_lease,
    "12.7-reloaded-deleted-held": reloaded_deleted_held,
    "sim909-victim-binding-in-flight": victim_binding_in_flight,
    "sim870-restore-undoes-gang-bind": restore_undoes_gang_bind,
    "sim1326-binding-failed-in-new-era": binding_failed_in_new_era,
    "sim2977-list-asked-after-era-list": list_asked_after_era_list,
    "sim3873-era-begun-after-other-listed": era_begun_after_other_listed,
    "sim4450-nominee-gone": nominee_gone,
    "sim1541-gpus-freed-during-attempt": gpus_freed_during_attempt,
    "sim3163-reloaded-nomination-unset": reloaded_nomination_unset,
    "sim3348-own-binding-after-flush": own_binding_after_flush,
    "sim1326-victim-back-after-restore": victim_back_after_restore,
    "sim1326-gone-before-restore": gone_before_restore,
    "sim3935-deposed-inherited-held": deposed_inherited_held,
    "sim3127-partition-electing-without-record": partition_electing_without_record,
    "sim836-chained-to-a-leader-in-its-wait": chained_to_a_leader_in_its_wait,
    "shares-over-committed": shares_over_committed,
    "sim2557-relist-version-untold": relist_version_untold,
    "sim3260-restore-unbinds-under-pending-news": restore_unbinds_under_pending_news,
    "sim35133-gang-member-gone-while-refused": gang_member_gone_while_refused,
    "sim11867-reason-written-to-a-deleted-pod": reason_written_to_a_deleted_pod,
    "sim11505-surplus-beside-bindings-in-flight": surplus_beside_bindings_in_flight,
    "sim25470-restored-binding-shows-no-reason": restored_binding_shows_no_reason,
    "sim30598-restore-while-reserving": restore_while_reserving,
    "sim51148-outcome-of-an-earlier-decision": outcome_of_an_earlier_decision,
    "sim50161-reserving-pod-left": reserving_pod_left,
    "sim1019-release-over-reconcile": release_over_reconcile,
    "sim1019-reserved-under-release": reserved_under_release,
    "sim56736-restored-twice-from-one-backup": restored_twice_from_one_backup,
}


def replay(name: str) -> str | None:
    """The timeline ``name`` on a fresh world (every rule's: the rules a timeline calls are all
    there, and none runs uncalled): its violation, or None when it holds."""
    machine = FullMachine()
    try:
        TIMELINES[name](machine)
    except AssertionError as exc:
        return str(exc)
    finally:
        machine.teardown()
    return None
