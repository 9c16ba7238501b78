"""Where one pod (or one node's part of a gang) goes, over the snapshot and the filters.

- ``nodes``: node choice and order (rules 2 and 4) and the unschedulable reasons (rule 5).
- ``devices``: node choice for a pod whose ResourceClaims we allocate (issue 29), by the
  snapshot's per-class index of free devices.
- ``domainorder``: broken domains first, for a single GPU pod's ties (issue 32 item 7).
"""
