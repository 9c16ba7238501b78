"""Priority and gang-aware preemption, above the cycle: it tries ``decide`` on trial states.

- ``preempt``: which lower-priority pods to evict so a unit fits, or why none (``preempt``).
- ``candidates``: the bounded search (per node, or over the cluster for a gang).
- ``victims``: who may be evicted, in which units, and how victim sets are ranked.
- ``budgets``: PodDisruptionBudgets as preemption weighs them.
"""
