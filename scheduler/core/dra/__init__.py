"""DRA: allocating ResourceClaims ourselves (issue 29, its pure part), with kube-scheduler v1.37's
semantics and our choice of devices by interconnect.

Modules, from the entry point down:

- ``allocator``: ``allocate(claims, classes, slices, in_use, node, labels, selectors,
  inventory, limits)`` -> one ``Allocation`` per claim, or a reason (and whether kube-scheduler
  would call it an Error). The search, the result (devices, config, node selector).
- ``choice``: devices mapped to the node's GPUs (by UUID through the inventory, else coarsely by
  PCIe root and NUMA node), rule 1 as the key among solutions, and the candidate order that
  meets rule 1's best set first.
- ``pools``: slices gathered into the node's usable pools (generations, completeness, validity,
  node-local, network-attached and per-device node selection).
- ``taintrules``: DeviceTaintRules' taints patched into a slice's devices, as kube-scheduler's
  slice tracker does, before the pools are gathered.
- ``constraints``: matchAttribute and distinctAttribute.
- ``capacity``: consumable capacity (request policies, shares).
- ``inuse``: the devices and capacity held by allocated claims.
- ``extended``: the claim kube-scheduler creates for extended resources a DeviceClass backs.
- ``cel`` (the only module importing the CEL library, cel-expr-python) and ``semver``: device
  selectors in the Kubernetes DRA CEL environment, memoised, bounded.
- ``budget``: the deterministic bounds of one allocation (no clock in the core; the bounds
  are the ``dra`` settings, ``settings.DraLimits``).
- (the v1 objects the allocator reads and writes live in ``model/dra.py``: the vocabulary.)

Covered (GA and beta-on in v1.37): ResourceSlices with pools and generations; nodeName,
nodeSelector, allNodes, perDeviceNodeSelection; DeviceClass selectors and config; requests with
``exactly`` (ExactCount, All, count, selectors, adminAccess, tolerations, capacity) and
``firstAvailable``; matchAttribute and distinctAttribute; device taints (NoSchedule, NoExecute;
None ignored); shared counters (partitionable devices); consumable capacity with
allowMultipleAllocations and share ids; binding conditions copied into the result (their pools
last); claim config (FromClass, FromClaim); the 32-result limit.

Not covered: alpha features (list attributes and ``includes()``, compatibility groups, derived
attributes, node allocatable resources, partition types, optional node operations), fractional
capacity ranges (beta but off in a default v1.37 binary), claims reserved for a PodGroup
(DRAWorkloadResourceClaims, beta off), and the CEL libraries listed in cel.py. DeviceTaintRules
(GA) are covered by the snapshot, which patches their taints into the slices' devices before
gathering pools, as kube-scheduler's slice tracker does (``taintrules``).

Where it plugs in: scheduler/kube/dracodec.py decodes resource.k8s.io/v1 objects into
``model.dra`` and encodes an ``Allocation`` as ``status.allocation``; the snapshot keeps
slices, classes, claims, the devices in use (every claim's allocation and our assumed ones) and
a per-class index of free devices (snapshot/devices.py); the DRA filter (filters/dra.py) calls
``allocate_pools`` per node for the pod's unallocated claims and the special claim of its
DRA-backed extended resources (``extended``), and the placement carries the allocations
(``Placement.claims``) for the binder to write before the Binding.
"""
