"""`topo-scheduler simulate`: the pure core replayed over Kubernetes manifests.

- ``loader``: YAML/JSON files to Node and Pod inputs, with file and line on every error;
- ``simulate``: the run itself (nodes, then running pods, then pending pods in file order);
- ``render``: the JSON contract and the table for people.
"""
