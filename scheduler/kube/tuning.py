"""The defaults of the apiserver client's and the watches' settings (the config file's
run.tuning), in a module that imports neither the Kubernetes client nor the reflector: the config
layer reads them without loading either."""

from __future__ import annotations

from typing import Final

import msgspec

# Connections: watches (up to 8, each holding one) + events and status patches + the binds in
# flight (bindConcurrency), which the scheduler adds (service/app.py).
POOL_SIZE: Final = 32
# How long one apiserver call may take before it counts as failed.
REQUEST_TIMEOUT_S: Final = 30.0
# Pods per page of a paged LIST: big enough that 50,000 pods take 25 round trips, small enough
# that a page's body is a few MB.
LIST_PAGE: Final = 2000


class WatchTiming(msgspec.Struct, frozen=True):
    """How a Reflector (watch.py) lists and watches; the config file's run.tuning fills it
    (these are the defaults of its watch fields)."""

    # A watch asks the apiserver to end it after this long, and is opened again from the last
    # resourceVersion: a connection that died silently is noticed at the latest then.
    timeout_s: int = 300
    # After a failed LIST or watch the reflector lists again after a backoff that starts here and
    # doubles up to ``backoff_max_s``; a watch that ended normally starts it over.
    backoff_s: float = 0.5
    backoff_max_s: float = 10.0
    # Items of a LIST page decoded between two turns of the event loop.
    decode_slice: int = 250
