"""Where one pod (or one node's part of a gang) goes, over the snapshot and the filters.

- ``nodes``: node choice and order (rules 2 and 4) and the unschedulable reasons (rule 5).
- ``shapes``: a node's shape as the fragmentation measure reads it.
"""
