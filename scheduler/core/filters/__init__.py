"""kube-scheduler's filter plugins, one module each, pure; ``chain`` runs them in its order.

Each module mirrors one plugin (NodeResourcesFit in ``resources``; NodeUnschedulable,
TaintToleration, NodeAffinity and NodePorts in ``node``; InterPodAffinity in ``interpod``;
PodTopologySpread in ``spread``; the node restrictions of bound volumes in ``volumes``) and uses
kube-scheduler's reason texts, so that a pending pod reads the same under either scheduler.

The filters only read: what a pod requests and a node has is counted in ``core/resources``
(``accounting``, ``ports``), which the snapshot charges. ``requeue`` holds kube-scheduler's
queueing hints: which waiting pods a newly bound pod may help (the same affinity and spread terms
the filters read).
"""
