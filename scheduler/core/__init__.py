"""The pure scheduling core: snapshot in, decisions out.

Nothing in this package performs I/O, reads a clock, or imports asyncio, Kubernetes or Redis clients
(an import-linter contract in pyproject.toml enforces it). The live scheduler (scheduler/service),
the simulator (scheduler/sim) and the tests all drive the same functions:

- ``objects``: the small Kubernetes-shaped inputs (NodeInput, PodInput) the shell decodes for us.
- ``inventory``: a node's GPUs and topology from its annotations (ours, or HAMi's).
- ``requests``: what a pod asks for (whole GPUs, shared GPUs, gang membership, policies).
- ``topology``: link scores and the exact best-GPU-set search (rule 1).
- ``cluster``: ClusterState, the mutable-but-pure bookkeeping of who holds which GPU.
- ``placement``: node choice for one pod (rules 2 and 4) and the unschedulable reasons (rule 5).
- ``gang``: all-or-nothing gang planning as a transaction (rule 3).
- ``cycle``: the entry points, ``decide`` and ``schedule_in_order``.
"""
