"""The snapshot's parts, each with one job; ``ClusterState`` (core/cluster.py) composes them and
is the only way to change them (kube-scheduler's NodeInfo/Snapshot: the snapshot does the
accounting, placement and filters only read it).

- ``nodes``: each node's state and accounting (``NodeState``) and the indexes over the nodes
  (``NodeIndex``: equivalence classes, topology domains, label keys).
- ``holdings``: which pod holds which GPUs or card shares (``Holding``), and gangs' bound members.
- ``bound``: what a bound pod holds, read from its annotations or guessed.
- ``records``: every pod on a node as the Kubernetes filters read it (``PodRecord``).
- ``nominations``: what is held on a node for a preemptor while its victims terminate.
- ``watched``: the watched inputs, one keyed collection per kind (``Keyed``, ``Kind``).
- ``undo``: the typed operations a tentative scope reverts (``UndoLog``).
"""
