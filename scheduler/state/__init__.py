"""The scheduler's store: who holds which GPU, in-flight reservations, gangs, the nominations
that hold GPUs for preemptors, and the leader lease.

One interface (``base.Store``), two implementations:
- ``memory.MemoryStore``: the embedded default for a single replica and for tests of the service;
- ``redis_store.RedisStore``: several replicas against one Redis, every multi-key change one Lua
  script that first checks the caller's lease and fencing epoch, so a deposed leader never writes.

The apiserver stays the source of truth for bound pods; a new leader reconciles the store against
it (``Store.reconcile``) before its first decision, so a flushed or brand-new Redis loses nothing
but the nominations, which the service derives again.
"""
