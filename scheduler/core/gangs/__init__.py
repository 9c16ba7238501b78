"""Gang planning (rule 3): all or nothing, as a transaction on the snapshot, and across nodes
through topology domains.

- ``planning``: a gang's pending members planned in one pass (``plan_gang``).
- ``members``: a member as planning sees it, and how one node's part shares its GPUs.
- ``constraints``: a gang's topology constraint, from every source its pods name.
- ``domainchoice``: which domains a gang goes to (counting, BestFit, packing by rank).
- ``indomains``: a gang planned through topology domains: domain, nodes and GPU sets together.
"""
