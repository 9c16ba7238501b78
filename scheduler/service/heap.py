"""The cyclic garbage collector around start-up: paused until the watches have synced, then
everything alive frozen.

Nearly all the scheduler allocates is acyclic data that reference counting frees: decoded pods
and nodes, snapshot records, holdings, book entries. The cyclic collector still walks every
tracked object in each full collection, with the event loop stopped: after the imports alone
(kubernetes-asyncio's models) that is some 90,000 objects and about 60 ms, a pause a pod created
at that moment waits out (bench-live's create-to-bind p99), and more with every bound pod the
snapshot holds. While the first LISTs decode (50,000 bound pods at bench-scale), collections
triggered by the allocations walk the growing heap again and again.

So ``pause()`` turns collection off when the process starts, and ``settle()``, once the watches
have synced, freezes what is alive (``gc.freeze``: never walked again; reference counting still
frees each object when it goes) and turns collection back on for what comes after. A cycle
created during start-up stays until exit: a bounded, one-time cost.
"""

from __future__ import annotations

import gc


def pause() -> None:
    gc.disable()


def settle() -> None:
    gc.freeze()
    gc.enable()
