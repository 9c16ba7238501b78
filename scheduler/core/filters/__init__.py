"""kube-scheduler's filter plugins, one module each, pure; ``chain`` runs them in its order.

Each module mirrors one plugin (NodeResourcesFit in ``resources``; NodeUnschedulable,
TaintToleration, NodeAffinity and NodePorts in ``node``; InterPodAffinity in ``interpod``;
PodTopologySpread in ``spread``; the node restrictions of bound volumes in ``volumes``) and uses
kube-scheduler's reason texts, so that a pending pod reads the same under either scheduler.
"""
