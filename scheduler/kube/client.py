"""The apiserver client both the scheduler and the node agent use: from a kubeconfig file, or
the pod's in-cluster service account when none is given."""

from __future__ import annotations

from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient, Configuration


async def api_client(kubeconfig: str | None) -> ApiClient:
    configuration = Configuration()
    if kubeconfig:
        await k8s_config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration
        )
    else:
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    return ApiClient(configuration)
