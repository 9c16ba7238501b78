"""The cluster as the core sees it: ``ClusterState`` and the indexes it keeps. No filter here:
the snapshot charges with ``resources``' accounting and the filters only read it.

- ``cluster``: ClusterState, node classes, assume, the scoped ``tentative()`` transaction.
- ``podindex``: every bound pod reduced to what the Kubernetes filters read.
- ``nodesums``: what each node holds, summed as the drift auditor compares it.
- ``domains``: topology levels between nodes and which domain of each a node is in.
- ``fragmentation``: the held pods' request classes (the profile), the target workload they make
  and the fragmentation measure over node shapes.
"""
