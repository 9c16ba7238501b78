"""What things are: the vocabulary every other wing speaks. Imports nothing else of the core.

- ``objects``: the small Kubernetes-shaped inputs (NodeInput, PodInput...) the shell decodes.
- ``names``: annotation, label and resource names (public contracts).
- ``labels``: label and node selector matching, as apimachinery defines it.
- ``dra``: the DRA objects (resource.k8s.io/v1 slices, classes, claims, allocations).
- ``decisions``: what the core answers (Placed, Waiting, Unschedulable and their Placement).
- ``gangsources``: which gang a pod says it belongs to, from any of the six sources.
"""
