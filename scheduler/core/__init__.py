"""The pure scheduling core: snapshot in, decisions out.

Nothing in this package performs I/O, reads a clock, or imports asyncio, Kubernetes or Redis clients
(an import-linter contract in pyproject.toml enforces it). The live scheduler (scheduler/service),
the simulator (scheduler/sim) and the tests all drive the same functions.

The core is built in wings, each a package whose ``__init__`` lists its modules. A wing imports
only the wings below it (the ``core wings`` layers contract in pyproject.toml, with one against
import circles); from the top:

- ``preemption/``: which lower-priority pods to evict so that a unit fits (it calls ``decide``).
- ``cycle``: the entry points, ``decide`` and ``schedule_in_order``.
- ``gangs/``: all-or-nothing gang planning as a transaction (rule 3), across topology domains.
- ``placement/``: node choice for one pod (rules 2 and 4) and the unschedulable reasons (rule 5).
- ``filters/``: kube-scheduler's filters, read-only over the snapshot, and its queueing hints.
- ``snapshot/``: ClusterState, the mutable-but-pure bookkeeping of who holds what, its indexes,
  topology domains and the fragmentation profile.
- ``dra/``: DRA claim allocation (ResourceSlices, DeviceClasses, CEL selectors), kube-scheduler's
  structured allocator with devices chosen by interconnect; the filters call it per node.
- ``resources/``: what a pod asks (requests), what a node has (inventory, GPU sets: rule 1), and
  the accounting of both (requests, allocatable, ports) that the snapshot charges.
- ``formats/`` and ``settings``: the public annotation formats; the core's settings.
- ``model/``: what things are: the Kubernetes-shaped inputs, names, selectors, decisions, gangs.
"""
