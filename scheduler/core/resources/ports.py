"""The host ports a pod takes on its node, and the count of them in use there (NodePorts).

The snapshot charges a bound pod's ports to its node (``charge_ports``) and the NodePorts filter
(``filters/node.py``) reads the count; a pod's ports are its app containers' and its sidecars'.
"""

from __future__ import annotations

from ..model.objects import HostPort, PodInput

# Ports in use on a node: (protocol, port) -> {host IP: how many pods use it}.
PortUse = dict[tuple[str, int], dict[str, int]]


def host_ports(pod: PodInput) -> tuple[HostPort, ...]:
    """The pod's host ports: app containers and sidecars (init containers that keep running)."""
    out: list[HostPort] = []
    for c in pod.init_containers:
        if c.restart_policy == "Always":
            out.extend(c.host_ports)
    for c in pod.containers:
        out.extend(c.host_ports)
    return tuple(out)


def charge_ports(used: PortUse, ports: tuple[HostPort, ...], sign: int) -> None:
    """Count ``ports`` in use once more (``sign`` 1) or once less (-1); a port no pod uses any
    more leaves ``used``."""
    for p in ports:
        key = (p.protocol, p.port)
        ips = used.setdefault(key, {})
        ips[p.host_ip] = ips.get(p.host_ip, 0) + sign
        if ips[p.host_ip] <= 0:
            del ips[p.host_ip]
        if not ips:
            del used[key]
