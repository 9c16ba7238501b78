"""What a pod asks and a node has, and how it is counted: read from the model's objects with the
settings and the annotation formats, below the snapshot that charges them.

- ``requests``: a pod's GPU request (whole GPUs, shared cards, policies) and quantities.
- ``inventory``: a node's GPUs and their topology, from its annotations (ours or HAMi's).
- ``gpusets``: GPU link scores and the exact best-GPU-set search inside one node (rule 1).
- ``accounting``: a pod's effective requests and a node's allocatable, as the kubelet counts them.
- ``resize``: what a bound pod is charged while it is resized in place.
- ``ports``: the host ports a pod takes and the count of them in use on a node.
- ``memo``: a bounded memo, for the answers above that a caller (the snapshot) keeps.
"""
