"""A decide-nothing binder: what the apiserver can take, the ceiling of any scheduler on it.

It lists the pending pods of its scheduler name in one namespace and binds them round robin over
the nodes, 64 Bindings in flight, without looking at any resource. bench-live runs it as one of
its contenders, in its own process (so its RSS is its own).

Usage: python -m benchmarks.binder SERVER TOKEN NAMESPACE SCHEDULER_NAME EXPECTED
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
import sys

import aiohttp

IN_FLIGHT = 64


async def main(server: str, token: str, namespace: str, name: str, expected: int) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(ssl=context, limit=IN_FLIGHT)
    async with aiohttp.ClientSession(server, headers=headers, connector=connector) as http:
        async with http.get("/api/v1/nodes") as resp:
            nodes = itertools.cycle(
                sorted(n["metadata"]["name"] for n in (await resp.json())["items"])
            )
        done: set[str] = set()
        slots = asyncio.Semaphore(IN_FLIGHT)

        async def bind(pod: str, node: str) -> None:
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            }
            async with slots:
                path = f"/api/v1/namespaces/{namespace}/pods/{pod}/binding"
                async with http.post(path, data=json.dumps(body)) as resp:
                    if resp.status < 300 or resp.status == 409:
                        done.add(pod)

        while len(done) < expected:
            selector = f"spec.schedulerName={name},spec.nodeName="
            async with http.get(
                f"/api/v1/namespaces/{namespace}/pods", params={"fieldSelector": selector}
            ) as resp:
                pods = [p["metadata"]["name"] for p in (await resp.json())["items"]]
            pods = [p for p in pods if p not in done]
            if not pods:
                await asyncio.sleep(0.2)
                continue
            await asyncio.gather(*(bind(p, next(nodes)) for p in pods))


if __name__ == "__main__":
    server, token, namespace, name, expected = sys.argv[1:6]
    asyncio.run(main(server, token, namespace, name, int(expected)))
