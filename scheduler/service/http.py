"""The HTTP side of the scheduler: probes, metrics and a debug endpoint (aiohttp).

- ``/healthz``: the process is alive (200 while the event loop answers).
- ``/readyz``: 200 once the watches are synced and the replica is leader or standby; 503 while
  starting or shutting down (so a Service stops sending to a replica on SIGTERM first).
- ``/metrics``: Prometheus text format from this process's own registry.
- ``/debug/nominations``: the GPUs held for preemptors (pod, node, devices, priority, seconds
  left), as JSON.
- ``/debug/nodes``: the snapshot's running sums per node (pods, requests, host ports, GPU
  holders: core/snapshot/nodesums.py), as JSON: what the drift auditor compares with a LIST.
- ``/debug/pods/{namespace}/{name}``: the last decision about one pod, as JSON. These name pods,
  nodes and GPUs, so by default it answers clients on this machine only (a loopback peer: a shell
  in the pod, ``kubectl port-forward``) and 403 to anyone else who can reach the port, the way
  kube-scheduler keeps its debug handlers behind authentication; ``run.debugFromAnywhere``
  (``--debug-from-anywhere``) opens it.

Port 0 means "pick a free port"; the chosen port is logged and returned, so several replicas can
run on one machine in tests.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

import msgspec
import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .metrics import Metrics

log = structlog.get_logger("http")


class ProbeServer:
    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        readiness: Callable[[], tuple[bool, str]],
        explain: Callable[[str], Any | None],
        debug_from_anywhere: bool = False,
        nominations: Callable[[], Any] = list,
        nodes: Callable[[], Any] = dict,
        before_scrape: Callable[[], None] = lambda: None,
    ) -> None:
        self.host = host
        self.port = port
        self._metrics = metrics
        self._readiness = readiness
        self._explain = explain
        self._nominations = nominations
        self._nodes = nodes
        self._before_scrape = before_scrape  # sets the gauges computed at scrape time
        self._debug_from_anywhere = debug_from_anywhere
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_handler)
        app.router.add_get("/debug/pods/{namespace}/{name}", self._debug_pod)
        app.router.add_get("/debug/nominations", self._debug_nominations)
        app.router.add_get("/debug/nodes", self._debug_nodes)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        log.info("http server listening", host=self.host, port=self.port)
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        ready, detail = self._readiness()
        return web.Response(status=200 if ready else 503, text=detail + "\n")

    async def _metrics_handler(self, _: web.Request) -> web.Response:
        self._before_scrape()
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _refused(self, request: web.Request) -> web.Response | None:
        if self._debug_from_anywhere or is_loopback(request.remote):
            return None
        log.warning("debug request refused", remote=request.remote, path=request.path)
        return web.json_response(
            {
                "error": "the debug endpoints answer clients on this machine only "
                "(run.debugFromAnywhere: true, or --debug-from-anywhere, opens them)"
            },
            status=403,
        )

    async def _debug_nominations(self, request: web.Request) -> web.Response:
        """The GPUs held for preemptors while their victims leave (the leader's view)."""
        return self._local_json(request, self._nominations)

    async def _debug_nodes(self, request: web.Request) -> web.Response:
        """The snapshot's sums per node (this replica's, leader or standby)."""
        return self._local_json(request, self._nodes)

    def _local_json(self, request: web.Request, read: Callable[[], Any]) -> web.Response:
        """``read()`` as JSON, for a client this endpoint answers (``_refused``)."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        return web.Response(body=msgspec.json.encode(read()), content_type="application/json")

    async def _debug_pod(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        found = self._explain(key)
        if found is None:
            return web.json_response({"pod": key, "error": "no decision recorded"}, status=404)
        return web.Response(body=msgspec.json.encode(found), content_type="application/json")


def is_loopback(remote: str | None) -> bool:
    """Whether a peer address is this machine's loopback (127.0.0.0/8, ::1, ::ffff:127.x).
    Unknown (None) or unparsable peers are not."""
    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback
