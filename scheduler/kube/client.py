"""The apiserver client both the scheduler and the node agent use: from a kubeconfig file, or
the pod's in-cluster service account when none is given.

Two of kubernetes-asyncio's defaults cost the scheduler throughput (measured with py-spy under a
backlog, see docs/benchmarks.md):

- its connection pool holds ``cpu_count * 5`` connections (10 on a 2-core node), and every
  watch keeps one for its whole life, so binds, events and status patches queued behind a
  handful of free connections. The pool is sized here for watches plus binds in flight.
- its aiohttp session trusts the environment, so every request re-read ``~/.netrc`` and the
  proxy variables (about 8% of the scheduler's samples). When no proxy variable is set there is
  nothing to find, so the session stops looking; with one set it is left as it is.
"""

from __future__ import annotations

import os

from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.client import ApiClient, Configuration

from .tuning import POOL_SIZE

_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")


async def api_client(kubeconfig: str | None, pool_size: int = POOL_SIZE) -> ApiClient:
    configuration = Configuration()
    if kubeconfig:
        await k8s_config.load_kube_config(
            config_file=kubeconfig, client_configuration=configuration
        )
    else:
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
    configuration.connection_pool_maxsize = pool_size
    client = ApiClient(configuration)
    if not any(os.environ.get(v) for v in _PROXY_VARIABLES):
        # kubernetes-asyncio builds its session with trust_env=True and offers no setting for
        # it; the flag is only read per request, so turning it off here is safe.
        session = client.rest_client.pool_manager
        if hasattr(session, "_trust_env"):
            session._trust_env = False
    return client
