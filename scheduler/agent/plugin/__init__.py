"""The kubelet device plugin of the node agent (issue 6).

- ``protos/``: our own .proto files for the kubelet's device plugin API (v1beta1) and PodResources
  API (v1), with the generated message modules (``protos/generate.py`` regenerates them).
- ``rpc.py``: typed gRPC bindings of both services, for the plugin and for the test kubelet.
- ``decide.py``: the pure decisions (which pod, which GPUs, strict or adopt).
- ``identify.py``: finding the pod being admitted (PodResources List plus the apiserver).
- ``server.py``: the plugin itself: serve, register, re-register, answer the kubelet.
"""
