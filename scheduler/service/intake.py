"""Watch events into the snapshot and the pod book (synchronous and cheap: no I/O here).

Three reflectors call in (watches.py): pending pods of this scheduler, pods bound to nodes (which
GPUs are in use), and nodes; and the optional ones: namespaces, claims and volumes once a pod
needs them, PodGroups of either API group while their CRD exists. Nodes and PodGroups go to the
snapshot directly. A bound pod is charged to the snapshot first (the bound watch is the truth),
then its event goes to the pod book; a pending pod's event goes to the book, whose table says
what happens (queue, store, re-read). A re-list becomes the events its differences mean: a pod
missing from a pending re-list has left the pending set (bound or deleted), one missing from a
bound re-list is ``BOUND_MISSING`` (the book re-reads a pod we bound ourselves before freeing
it, since the LIST may predate our Binding).

Every bound pod has a book entry: ours, or another scheduler's (OTHER when it holds no GPU we
track), so that every pod charged to the snapshot is uncharged when it leaves.

News older than what the book knows is no news. The two pod watches are separate streams, and
a bound re-list hands on a LIST taken seconds before its last page arrives, so an event can be
older than what the book learned meanwhile (a pod of the same name recreated and bound, a
re-read after a 409). Pods are ordered by resourceVersion (``PodInput.version``; two pods of
one name never coexist, so the newer one's versions are all higher): an event older than the
book's entry is dropped before it charges anything, and the end of a LIST does not speak for
an entry newer than the LIST (the watch that follows the LIST reports what happens to it).

That order holds within one era of the cluster's versions. A LIST whose version is below the
newest the book had been told when the LIST was asked for says they went back (etcd restored
without ``--bump-revision``): a new era begins, in which that LIST is the truth (``_new_era``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

import structlog

from scheduler.core.model.names import (
    KAI_TOPOLOGY_ANNOTATION,
    KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_TOPOLOGY_ANNOTATION,
    POD_GROUP_LABEL,
    VOLCANO_GROUP_ANNOTATION,
)
from scheduler.core.model.objects import (
    NodeInput,
    PodInput,
)
from scheduler.core.snapshot.cluster import ClusterState
from scheduler.core.snapshot.holdings import bits
from scheduler.core.snapshot.watched import Kind
from scheduler.kube.podgroups import POD_GROUPS, UPSTREAM_POD_GROUPS, VOLCANO_POD_GROUPS
from scheduler.kube.topologies import KAI_TOPOLOGIES, KUEUE_TOPOLOGIES

from .effects import Effects, charge
from .podbook import LISTED_STAGES, Ctx, Event, PodBook, Stage
from .queue import SchedulingQueue
from .tasks import Tasks

log = structlog.get_logger("scheduler")

T = TypeVar("T")

# Kueue's annotations naming a level by label key (a Kueue Topology may hold its hierarchy).
_KUEUE_TOPOLOGY = (
    KUEUE_REQUIRED_TOPOLOGY_ANNOTATION,
    KUEUE_PREFERRED_TOPOLOGY_ANNOTATION,
    KUEUE_SLICE_TOPOLOGY_ANNOTATION,
)


class Intake:
    def __init__(
        self,
        scheduler_name: str,
        state: ClusterState,
        book: PodBook,
        effects: Effects,
        node_changed: Callable[[str], None],
        queue: SchedulingQueue,
        tasks: Tasks,
        watch_needed: Callable[[str], bool],
    ) -> None:
        self.name = scheduler_name
        # Starts the namespace ("namespaces") or claim and volume ("volumes") watches the first
        # time a pending pod needs them; True once that watch has listed. For the PodGroup
        # watches (by CRD name, ``POD_GROUPS.name``...), which run while their CRD exists: True
        # once listed, or when the CRD does not exist (nothing to wait for).
        self.watch_needed = watch_needed
        self.state = state
        self.book = book
        self.effects = effects
        self._node_changed = node_changed  # the store's inventories follow (inventories.py)
        self.queue = queue
        self.tasks = tasks
        self.bound_synced = False
        # A bound LIST under way: pod key -> UID of what it showed; the pods it showed that
        # were older than the book's (the truth if the LIST begins a new era); the book's
        # newest version when the LIST was asked for.
        self._listed: dict[str, str] = {}
        self._stale: list[PodInput] = []
        self._bound_since = 0
        # How far the bound pods' view reaches: the resourceVersion up to which the bound
        # watch has delivered everything (0: unknown; ``bound_view_covers``).
        self.bound_version = 0
        # A pending LIST under way: the pods it showed that are ours and pending, by key; the
        # book's newest version when it was asked for.
        self._pending: dict[str, PodInput] = {}
        self._pending_since = 0
        # Eras begun (``_new_era``); the pod watch that has not listed in this era yet, if any
        # (``between_eras``), and the era each watch's LIST under way was asked for in. LISTs
        # asked for (both watches, counted): each watch's LIST under way, and the one that
        # began the current era, by when they were asked for.
        self._eras = 0
        self._unlisted = ""
        self._pending_era = self._bound_era = 0
        self._asked = self._pending_asked = self._bound_asked = self._era_asked = 0
        # Each pod watch's last LIST that ended, by when it was asked for (``_new_era``).
        self._ended = {"pending-pods": 0, "bound-pods": 0}
        # The pods the pending watch shows pending (its last word on them) while the book holds
        # them bound: set aside as stale, unless the bound watch stops showing them (``_unbound``).
        self._set_aside: dict[str, PodInput] = {}

    # ---- pending pods ------------------------------------------------------------------------

    def ours_pending(self, pod: PodInput) -> bool:
        # A gated pod is not ours to attempt until its gates are gone (kube-scheduler's
        # SchedulingGates): the update that removes the last gate makes it pending.
        return (
            pod.scheduler_name == self.name
            and not pod.node_name
            and not pod.deleting
            and not pod.finished
            and not pod.scheduling_gates
        )

    def watches_ready(self, pod: PodInput) -> bool:
        """Whether the watches this pod's filters read have listed (starting them if needed):
        a pod with a claim is not decided before claims and volumes are known, nor one with a
        namespaceSelector before namespaces are, nor one naming a PodGroup before the PodGroup
        watch has listed (it would wait "for the PodGroup to exist"), nor one naming a KAI
        Topology, or Kueue's topology levels, before that project's Topology watch has, nor one
        with a ResourceClaim or an extended resource (a DeviceClass may back it: KEP-5004)
        before DRA's watches have."""
        ready = True
        if pod.claims:
            ready = self.watch_needed("volumes") and ready
        if uses_namespace_selector(pod):
            ready = self.watch_needed("namespaces") and ready
        if POD_GROUP_LABEL in pod.labels:
            ready = self.watch_needed(POD_GROUPS.name) and ready
        if VOLCANO_GROUP_ANNOTATION in pod.annotations:
            ready = self.watch_needed(VOLCANO_POD_GROUPS.name) and ready
        if KAI_TOPOLOGY_ANNOTATION in pod.annotations:
            ready = self.watch_needed(KAI_TOPOLOGIES.name) and ready
        if any(key in pod.annotations for key in _KUEUE_TOPOLOGY):
            ready = self.watch_needed(KUEUE_TOPOLOGIES.name) and ready
        if pod.scheduling_group:
            ready = self.watch_needed(UPSTREAM_POD_GROUPS.name) and ready
        if pod.resource_claims or asks_extended(pod):
            ready = self.watch_needed("dra") and ready
        return ready

    def replace_pending(self, pods: list[PodInput], version: int = 0) -> None:
        """A whole LIST of pending pods at resourceVersion ``version`` (0: unknown)."""
        self.pending_list_begin()
        self.pending_list_page(pods)
        self.pending_list_end(version)

    # A LIST of pending pods (kube/watch.py's Relist): its pages are gathered, and the end of
    # the LIST tells the book what it means as a whole.

    def pending_list_begin(self) -> None:
        self.book.list_begun("pending-pods")
        self._pending = {}
        self._pending_since = self.book.newest
        self._pending_era = self._eras
        self._asked += 1
        self._pending_asked = self._asked

    def pending_list_page(self, pods: list[PodInput]) -> None:
        self._pending.update((p.key, p) for p in pods if self.ours_pending(p))

    def pending_list_end(self, version: int) -> None:
        """The LIST (at resourceVersion ``version``, 0: unknown) is all in: every pending entry
        it lacks left the pending set, and the pods it shows are told in creation order."""
        fresh, self._pending = self._pending, {}
        self._new_era(
            "pending-pods", version, self._pending_since, self._pending_era, self._pending_asked
        )
        self.book.list_ended("pending-pods")
        self._set_aside = {}  # the LIST is the pending watch's whole word now
        for key, entry in list(self.book.entries.items()):
            if entry.stage in (Stage.BOUND, Stage.OTHER):
                continue  # a pending re-list says nothing about a bound pod
            pod = fresh.get(key)
            if pod is None or (entry.uid and pod.uid != entry.uid):
                self.effects.dispatch(key, entry.uid, Event.PENDING_LEFT, None)
        # A LIST returns pods in name order; the queue wants them in creation order.
        for pod in sorted(fresh.values(), key=lambda p: (p.created, p.key)):
            self.pending_event("ADDED", pod)

    def older(self, pod: PodInput) -> bool:
        """The book knows a newer state of this pod's name than ``pod`` (0: unknown)."""
        entry = self.book.get(pod.key)
        return entry is not None and 0 < pod.version < entry.version

    def pending_event(self, kind: str, pod: PodInput) -> None:
        if self.older(pod):
            return
        self._set_aside.pop(pod.key, None)
        if kind == "DELETED":
            # The pod left the pending selector: bound (its node is set) or deleted.
            ended = pod.deleting and not pod.node_name
            self.effects.dispatch(
                pod.key, pod.uid, Event.PENDING_ENDED if ended else Event.PENDING_LEFT, None
            )
        elif self.ours_pending(pod):
            self._replaced(pod)
            self.watches_ready(pod)  # start what it needs now: it lists while the pod queues
            entry = self.book.get(pod.key)
            same = entry is not None and entry.uid == pod.uid and pod.same_as(entry.pod)
            event = Event.PENDING_SAME if same else Event.PENDING_SEEN
            self.effects.dispatch(pod.key, pod.uid, event, Ctx(pod=pod))
            if self.book.stage(pod.key, pod.uid) is Stage.BOUND:
                self._set_aside[pod.key] = pod
        elif pod.deleting or pod.finished:
            self.effects.dispatch(pod.key, pod.uid, Event.PENDING_ENDED, None)
        else:
            self.effects.dispatch(pod.key, pod.uid, Event.PENDING_LEFT, None)

    def read(self, pod: PodInput | None) -> None:
        """What a read of a pod's name found (a GET: newer than anything either watch has
        delivered; a new leader reads the names a store record holds under another UID than
        the book's), told as the watch that shows such a pod would tell it: another UID than
        the book's means the book's pod was deleted; a bound pod goes as the bound watch's
        event, an unbound one as the pending watch's. Nothing found: nothing is told (the book's
        pod, if it left, is told by the lagging watches, or a re-list's end at the latest)."""
        if pod is None:
            return
        self._replaced(pod)
        if pod.node_name:
            self.bound_event("MODIFIED", pod)
        else:
            self.pending_event("MODIFIED", pod)

    def _replaced(self, pod: PodInput) -> None:
        """Another UID under a tracked name: the tracked pod was deleted."""
        entry = self.book.get(pod.key)
        if entry is not None and entry.uid and pod.uid and entry.uid != pod.uid:
            self.effects.dispatch(pod.key, entry.uid, Event.REPLACED, None)

    # ---- bound pods --------------------------------------------------------------------------

    def replace_bound(self, pods: list[PodInput], version: int = 0) -> None:
        """A whole LIST of bound pods at resourceVersion ``version`` (0: unknown)."""
        self.bound_list_begin()
        self.bound_list_page(pods)
        self.bound_list_end(version)

    # A LIST of bound pods, taken in page by page as it arrives (kube/watch.py's Relist): each
    # pod is charged as it comes, and the end of the LIST tells which the book held that it
    # did not show.

    def sizes(self) -> dict[str, int]:
        return {
            "listing": len(self._listed),
            "listed-stale": len(self._stale),
            "listing-pending": len(self._pending),
            "set-aside": len(self._set_aside),
        }

    def bound_list_begin(self) -> None:
        self.book.list_begun("bound-pods")
        self._listed, self._stale = {}, []
        self.book.bound_lists += 1
        self._bound_since = self.book.newest
        self._bound_era = self._eras
        self._asked += 1
        self._bound_asked = self._asked

    def bound_list_page(self, pods: list[PodInput]) -> None:
        for pod in pods:
            if pod.node_name and not pod.finished:
                self._listed[pod.key] = pod.uid
            if self.older(pod):
                self._stale.append(pod)  # kept until the LIST's end says which era it is of
            else:
                self.bound_event("ADDED", pod)

    def bound_list_end(self, version: int) -> None:
        """The LIST (at resourceVersion ``version``, 0: unknown) is all in: every entry it
        lacks has left, unless the book learned of it after the LIST was taken. A LIST that
        begins a new era is the truth: the pods it showed that were older than the book's
        are taken in now, and the versions of the era before keep nothing."""
        listed, self._listed = self._listed, {}
        stale, self._stale = self._stale, []
        if self._new_era(
            "bound-pods", version, self._bound_since, self._bound_era, self._bound_asked
        ):
            for pod in stale:
                self.bound_event("ADDED", pod)
        elif stale:
            log.info("older than what is known: dropped", pods=[p.key for p in stale[:20]])
        for entry in self.book.in_stages(LISTED_STAGES):
            uid = listed.get(entry.key)
            if uid is not None and (not entry.uid or uid == entry.uid):
                continue
            if 0 < version < entry.version:
                continue  # newer than the LIST: the watch from the LIST's version tells
            self.effects.dispatch(entry.key, entry.uid, Event.BOUND_MISSING, None)
            self._unbound(entry.key, entry.uid)
        self.bound_synced = True
        self.bound_version = version  # the LIST's view (0: unknown), even below the last
        self.book.bound_listed = self.book.bound_lists  # the last begun: only one at a time
        self.book.list_ended("bound-pods")

    def bound_progress(self, version: int) -> None:
        """The bound watch has delivered everything up to ``version`` (a bookmark)."""
        self.bound_version = max(self.bound_version, version)

    def bound_view_covers(self, pods: Iterable[PodInput]) -> bool:
        """Whether the bound pods' view is at least as new as these pending pods: the bound
        watch has delivered everything up to their versions (its events, LISTs and bookmarks;
        unknown versions order nothing, so they pass).

        The two pod watches are separate streams with no order between them: the pending one
        can show a gang's new members while the bound one still shows the members they replace
        running (a re-list or a lag, and the deletions of a JobSet or Kubeflow restart, which
        came before the new pods, not delivered yet). Counted, those members made the new ones
        members beyond the minimum, bound one at a time: a partial gang holding GPUs (issue
        30, sim seed 5). A gang's bound members are therefore counted only in a view that
        covers the members they are counted for (cycle.py); it catches up with the bound
        watch's next event or bookmark (about once a minute). A pod's version is the lower of
        its own and the book's (0 after an etcd restore began a new era: the old era's versions
        order nothing)."""
        if not self.bound_version:
            return True
        for pod in pods:
            entry = self.book.get(pod.key)
            version = pod.version if entry is None else min(pod.version, entry.version)
            if version > self.bound_version:
                return False
        return True

    def _unbound(self, key: str, uid: str) -> None:
        """A bound pod missing from a bound LIST: if the pending watch's last word on it was
        "pending", that word stands now. The book set it aside as older than the Binding (a node
        name is never unset), which it is, in one era, unless its version is unknown; but after
        an etcd restore (a new era: versions order nothing) the pending LIST may come first and
        show the pod pending because the restore undid its Binding, and the bound LIST that
        comes after lacks it. Its entry leaves with BOUND_MISSING; told nothing more, the pod
        would stay pending unscheduled with no reason, for good (issue 30, sim seed 5)."""
        pod = self._set_aside.pop(key, None)
        if pod is not None and pod.uid == uid:
            log.warning("a bound pod is pending again (etcd restored from a backup?)", pod=key)
            self.pending_event("ADDED", pod)

    @property
    def between_eras(self) -> bool:
        """Whether one pod watch has listed in a new era and the other not yet: nothing is
        decided then (cycle.py). The two are separate streams, and after a restore each
        re-lists when its own watch breaks: the pending LIST can show the restored world (a
        pod pending again, another's namesake of the era before gone) while the bound view is
        still the era before's (the GPU free that the restore gave back to a pod bound at the
        backup). A decision from such a mix bound a pod on top of the restored one (issue 30,
        sim seed 179); kube-scheduler reads one stream, so its re-list replaces both at once."""
        return bool(self._unlisted)

    def _new_era(self, watch: str, version: int, since: int, era: int, asked: int) -> bool:
        """Whether a LIST at ``version`` begins a new era: its version is below ``since``, the
        newest the book had been told when the LIST was asked for. In one era that cannot be
        (a LIST is read at least as late as anything answered before it was asked for), so the
        resourceVersions went back: etcd was restored from a backup without
        ``--bump-revision``. Then every event about a known name would be "older" and dropped,
        and a LIST lacking a pod would not free it, for good; instead the LIST is the truth (as
        client-go's Replace is) and the book forgets the old era's versions. Said loudly: an
        operator should know the cluster went back in time. A LIST asked for in the current
        era ends the wait for ``watch`` (``between_eras``); one that begins an era starts the
        other's. The store is reconciled once the wait ends: its records are of the era before
        (a pod the restore brought back bound was released when it left, and the book takes it
        in as a bound pod, which writes nothing: sim seed 10), and only then does the book hold
        the new era's truth. A reconcile between the eras writes a bound view of the era before
        (an election's, or one a write failure asked for) and leaves none needed: asked for
        when the era began, the store lacked for good a pod the bound LIST then brought back
        (sim seed 603). Each reconcile is fenced by the leader's epoch, as any.

        A LIST whose version went back but that was asked for before the current era began
        (``era``: the other watch's LIST began it meanwhile) is of that era: asked for after
        the restore, it read the restored history the other LIST began the era with. It ends
        the wait and begins nothing: the news the book was told since the era began is of the
        same history and may be newer than the LIST, so the LIST's pods are judged by the
        book's versions like any LIST's. Taken for another new era, its stale pods were taken
        in as the truth: a pod recreated in the era after the restore (a new UID, pending) was
        replaced by its namesake the LIST still showed bound, and left the book for good when
        the bound watch then told that namesake's deletion (issue 30, sim seed 1132).

        So is one asked for after the LIST that began the era was (``asked``), whatever its
        version: a LIST reads the history of when it is asked for, since a request under way
        when etcd is restored fails (the apiservers restart for a restore) and is asked for
        again, so the LIST that began the era was asked for after the restore, and so was
        this one. Its version need not have gone back: the restored history may have passed
        the book's newest before it was read (pods created since the restore). Judged by its
        version alone, such a LIST ended no wait, and no other came (its watch goes on from
        it): nothing was decided again, for good (issue 30, sim seed 2977).

        For the same reason a LIST that begins an era leaves the other watch nothing to wait
        for when that watch's last LIST, already ended, was asked for after this one: it read
        the restored history this one did, or a later one. Its version need not have gone
        back (pods created since the restore), so it began nothing when it ended, and its watch
        goes on from it: waited for, the next LIST never came, and nothing was decided again,
        for good (issue 30, sim seed 3873: the pending LIST asked for at the restore arrived
        after a bound re-list asked for once gang j1 was created).

        A LIST of the current history (asked for in this era, or after the LIST that began
        it) that begins nothing tells the book its version, as an event tells its own: the
        cluster had reached it, so a later LIST below it went back. Its events are no longer
        the only word: a re-list (410 Gone) drops the queued ones, and a pod that left the
        selector meanwhile (finished, deleted) shows in the LIST only by its absence. Left
        untold, a second restore from the same backup looked like no restore at all (the
        LIST at the backup's version, the book's newest no higher): the Bindings decided in
        the era before were sent again onto GPUs the restore gave back to the pod bound there
        at the backup (issue 30, soak seed 2557)."""
        self._ended[watch] = asked
        if not 0 < version < since or era != self._eras:
            if era == self._eras or asked > self._era_asked:
                self.book.newest = max(self.book.newest, version)
            if watch == self._unlisted and (asked > self._era_asked or 0 < version < since):
                self._unlisted = ""
                self.effects.sync.request()
            return False
        log.warning(
            "resourceVersion went back (etcd restored without --bump-revision?): "
            "the LIST is the truth, and the versions of the era before order nothing",
            watch=watch,
            list_version=version,
            book_version=since,
        )
        self.book.new_era(version)
        self._eras += 1
        self._era_asked = asked
        other = "bound-pods" if watch == "pending-pods" else "pending-pods"
        self._unlisted = "" if self._ended[other] > asked else other
        if not self._unlisted:
            self.effects.sync.request()
        return True

    def bound_event(self, kind: str, pod: PodInput) -> None:
        self.bound_version = max(self.bound_version, pod.version)
        if self.older(pod):
            log.info("older than what is known: dropped", pod=pod.key, uid=pod.uid)
            return
        if kind == "DELETED" or pod.finished or not pod.node_name:
            self.effects.dispatch(pod.key, pod.uid, Event.BOUND_ENDED, Ctx(pod=pod))
            return
        self._replaced(pod)
        entry = self.book.get(pod.key)
        before = self.state.holdings.get(pod.key)
        charge(self.state, pod)
        after = self.state.holdings.get(pod.key)
        if (entry is None or entry.stage is Stage.OTHER) and not self.charged(pod.key):
            # Another scheduler's, holding no GPU we track: its record is charged all the same.
            self.effects.dispatch(pod.key, pod.uid, Event.OTHER_SEEN, Ctx(pod=pod))
            return
        moved = before is not None and after is not None and before.whole != after.whole
        stage = self.book.stage(pod.key, pod.uid)
        if moved and stage in (Stage.BINDING, Stage.ASSUMED, Stage.BOUND):
            # The device plugin reported other GPUs than we reserved (its mode `adopt`): they
            # are the truth, so the store must follow at the next (rate-limited) reconcile.
            assert after is not None
            log.info(
                "bound pod moved GPUs", pod=pod.key, node=after.node, devices=bits(after.whole)
            )
            self.effects.dispatch(pod.key, pod.uid, Event.BOUND_MOVED, Ctx(pod=pod))
        else:
            self.effects.dispatch(pod.key, pod.uid, Event.BOUND_SEEN, Ctx(pod=pod))

    def charged(self, key: str) -> bool:
        """The snapshot charges something for ``key`` (on its node, or waiting for the node)."""
        return self.state.held(key) is not None

    def _cluster_event(self) -> None:
        """Something the filters read changed: every waiting pod retries."""
        self.queue.on_cluster_event()
        self.tasks.wake()

    # ---- nodes -------------------------------------------------------------------------------

    def replace_nodes(self, nodes: list[NodeInput]) -> None:
        names = {n.name for n in nodes}
        for name in list(self.state.nodes):
            if name not in names:
                self.state.remove_node(name)
                self._node_changed(name)
        for node in nodes:
            self.node_event("ADDED", node)

    def node_event(self, kind: str, node: NodeInput) -> None:
        if kind == "DELETED":
            self.state.remove_node(node.name)
            self._node_changed(node.name)
            return
        current = self.state.nodes.get(node.name)
        if current is not None and current.node == node:
            # Heartbeat-only status churn: nothing we read changed. What we read includes the
            # allocatable amount of each whole-GPU resource (the codec keeps only those), so a
            # device plugin that registers, changes its count or goes down refreshes the node.
            return
        warning = self.state.set_node(node)
        if warning:
            log.warning("node inventory", node=node.name, warning=warning)
        self._node_changed(node.name)
        self._cluster_event()

    # ---- the watched inputs: namespaces, claims, volumes, DRA objects (watched once a pending
    # pod needs them), PodGroups and Topologies (while their CRD exists) ----------------------

    def replace(self, kind: Kind[T], items: Iterable[T], part: str | None = None) -> None:
        """A LIST of one kind (of its ``part`` only: one API group's PodGroups, one project's
        Topologies; [] when the CRD went away). Waiting pods retry whatever it changed: some
        waited for this LIST (``watches_ready``)."""
        self.state.inputs.of(kind).replace(items, part)
        self._cluster_event()

    def event(self, kind: Kind[T], change: str, item: T) -> None:
        """A watch event of one kind; one that changes nothing the core reads (a status update,
        ours say) is no news."""
        if self.state.inputs.of(kind).event(change, item):
            self._cluster_event()


def uses_namespace_selector(pod: PodInput) -> bool:
    affinity = pod.affinity
    if affinity is None:
        return False
    terms = [*affinity.pod_required, *affinity.anti_required]
    terms += [w.term for w in (*affinity.pod_preferred, *affinity.anti_preferred)]
    return any(t.namespace_selector is not None for t in terms)


def asks_extended(pod: PodInput) -> bool:
    """Whether any container asks for an extended resource (a domain-prefixed name outside
    kubernetes.io, as ``nvidia.com/gpu``), which a DeviceClass may back."""
    return any(
        "/" in name and not name.startswith(("kubernetes.io/", "requests."))
        for c in (*pod.containers, *pod.init_containers)
        for name in (*c.requests, *c.limits)
    )
