"""The cluster as the core sees it: ``ClusterState`` and the parts it composes, each with one
job (kube-scheduler's NodeInfo/Snapshot: the snapshot does the accounting, with ``resources``'
functions; placement and the filters only read it). No filter here.

- ``cluster``: ClusterState, the facade: the changes that touch several parts (set a node, hold,
  record, nominate), assume, the scoped ``tentative()`` transaction.
- ``nodes``: each node's state and accounting (``NodeState``) and the indexes over the nodes
  (``NodeIndex``: equivalence classes, topology domains, label keys).
- ``holdings``: which pod holds which GPUs or card shares (``Holding``), and gangs' bound members.
- ``bound``: what a bound pod holds, read from its annotations or guessed.
- ``records``: every pod on a node as the Kubernetes filters read it (``PodRecord``).
- ``podindex``: those records, indexed by namespace, label and anti-affinity.
- ``nominations``: what is held on a node for a preemptor while its victims terminate.
- ``watched``: the watched inputs, one keyed collection per kind (``Keyed``, ``Kind``).
- ``undo``: the typed operations a tentative scope reverts (``UndoLog``).
- ``memos``: what the snapshot remembers between decisions (parsed specs, quantities, topologies).
- ``domains``: topology levels between nodes and which domain of each a node is in.
- ``fragmentation``: the held pods' request classes (the profile), the target workload they make
  and the fragmentation measure over node shapes.
- ``nodesums``: what each node holds, summed as the drift auditor compares it.
- ``shares``: GPU nodes grouped by what a share's decision reads of their cards and cpu (and
  what a refused pod's reason counts of each); ``nameorder``: the order a share's search reads
  them in, as bitsets; ``names``: a set of node names with the smallest at hand.
- ``topocounts``: matching pods per topology domain, for spread and inter-pod affinity.
- ``devices``: DRA's part: the devices every claim holds, the slices by node and pool.
"""
