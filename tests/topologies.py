"""Real GPU topologies used across the tests (GPU numbering as nvidia-smi enumerates it).

Sources: gpu-topology-facts.md in the shared notes (DGX-1 V100 hybrid cube-mesh, 8-GPU PCIe
servers), seed 003 (HAMi's 4-GPU score example) and seed 000 (MetaX C500: MetaXLink groups with
PCIe switches underneath).
"""

from __future__ import annotations


def _matrix(n: int, default: str, pairs: dict[tuple[int, int], str]) -> list[list[str]]:
    rows = [[("X" if i == j else default) for j in range(n)] for i in range(n)]
    for (a, b), code in pairs.items():
        rows[a][b] = rows[b][a] = code
    return rows


_DGX1_NV2 = [(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)]
_DGX1_NV1 = [(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)]
DGX1_V100 = _matrix(8, "SYS", {**{p: "NV2" for p in _DGX1_NV2}, **{p: "NV1" for p in _DGX1_NV1}})

# 2 sockets x 2 PCIe switches x 2 GPUs.
PCIE8 = [
    [
        "X" if i == j else "PIX" if i // 2 == j // 2 else "NODE" if i // 4 == j // 4 else "SYS"
        for j in range(8)
    ]
    for i in range(8)
]

# MetaX C500, 8 cards: MetaXLink groups {0-3} and {4-7}; PCIe switches pair card i with i+4
# (a cross-group pair under one switch), other cross-group pairs go through the host.
METAX8 = [
    [
        "X" if i == j else "MX1" if i // 4 == j // 4 else "PIX" if i % 4 == j % 4 else "SYS"
        for j in range(8)
    ]
    for i in range(8)
]

# Seed 003's 4-GPU node, as pair scores.
SEED003 = [
    [0, 100, 100, 200],
    [100, 0, 200, 100],
    [100, 200, 0, 200],
    [200, 100, 200, 0],
]

# NVSwitch (DGX A100): every pair NV12.
NVSWITCH8 = _matrix(8, "NV12", {})
