"""The snapshot's parts: ``ClusterState`` (core/cluster.py) composes them.

- ``watched``: the watched inputs, one keyed collection per kind (``Keyed``, ``Kind``).
"""
