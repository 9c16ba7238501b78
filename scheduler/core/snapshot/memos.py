"""What a snapshot remembers between decisions, so that the core keeps no process-wide state.

Each memo is bounded and belongs to one snapshot (so two simulations, or two tests, never share
an answer); the functions that use one take it as an argument and work without it:

- ``asks``: what a spec's containers ask for (``resources.requests.parse_request``), and
  ``requests``: a spec's effective requests (``resources.accounting.pod_requests``): a gang's
  members and a Deployment's replicas share one spec, so one parse serves them all (a decision
  is about 0.3 ms; parsing a spec again costs a good part of it);
- ``quantities``: parsed Kubernetes quantities (``resources.requests.parse_quantity``): every
  node's allocatable and every bound pod's GPU counts are parsed when listed;
- ``topologies``: the interned topology matrices (``resources.gpusets.Topologies``): identical
  nodes share one Topology, its memo of best sets and their node class.
"""

from __future__ import annotations

from decimal import Decimal

from ..resources.accounting import RequestsMemo
from ..resources.gpusets import Topologies
from ..resources.memo import Memo
from ..resources.requests import AskMemo
from ..settings import MemoSettings


class Memos:
    """A snapshot's memos (see the module docstring), with their bounds (MemoSettings; None:
    the defaults): a few hundred specs and a few dozen quantities live in a cluster at once."""

    __slots__ = ("asks", "quantities", "requests", "topologies")

    def __init__(self, bounds: MemoSettings | None = None) -> None:
        bounds = bounds or MemoSettings()
        self.asks: AskMemo = Memo(bounds.asks)
        self.requests: RequestsMemo = Memo(bounds.requests)
        self.quantities: Memo[str, Decimal] = Memo(bounds.quantities)
        self.topologies = Topologies(bounds.best_sets)
