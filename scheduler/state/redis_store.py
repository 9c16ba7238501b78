"""RedisStore: the store shared by several scheduler replicas.

Key layout (``P`` is the configurable prefix, default ``topo-scheduler``):

| key | type | holds |
|---|---|---|
| ``P:lease`` | string, PX ttl | ``<holder>|<epoch>`` of the current leader |
| ``P:epoch`` | integer | the last epoch handed out; INCR on every new leader |
| ``P:pods`` | hash | pod UID -> the claim as JSON, exactly as Python encoded it |
| ``P:pstate`` | hash | pod UID -> ``reserved|<epoch>`` or ``bound|<epoch>`` |
| ``P:gpu:<node>`` | hash | GPU index -> UID of the pod holding it whole |
| ``P:card:<node>:<index>`` | hash | pod UID -> ``core|memoryMiB|sgpu|qos`` of its share |

Every change touching several keys is one Lua script, and each script begins with the same fence:
the lease key must hold exactly the caller's ``holder|epoch``. A deposed leader (another holder got
the lease) and a leader whose lease lapsed (it could not renew) are both refused at the moment of
the write, whatever their own clocks say. Holder names are unique per process, so even a flushed
Redis that restarts epochs at 1 cannot confuse two leaders.

Scheduling a pod costs two round trips: ``reserve`` before the bind, ``mark_bound`` after.
Scripts run through redis-py's ``register_script`` (EVALSHA, reloaded after a Redis restart).
Keys are computed inside the scripts, so this needs one Redis (or a replicated primary), not a
Redis Cluster.
"""

from __future__ import annotations

from typing import Any

import msgspec
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .base import Claim, Conflict, Fenced, ReconcileReport, Record, Unavailable

_PRELUDE = r"""
local P, HOLDER, EPOCH = ARGV[1], ARGV[2], ARGV[3]
local function held()
  return redis.call('GET', P .. ':lease') == HOLDER .. '|' .. EPOCH
end
local function fenced()
  return redis.error_reply('FENCED lease is ' .. tostring(redis.call('GET', P .. ':lease')) ..
    ', caller ' .. HOLDER .. '|' .. EPOCH)
end
local function card_key(node, index) return P .. ':card:' .. node .. ':' .. index end
local function drop(uid)
  local raw = redis.call('HGET', P .. ':pods', uid)
  if not raw then return false end
  local c = cjson.decode(raw)
  for _, index in ipairs(c.devices) do
    if redis.call('HGET', P .. ':gpu:' .. c.node, index) == uid then
      redis.call('HDEL', P .. ':gpu:' .. c.node, index)
    end
  end
  for _, s in ipairs(c.shares) do redis.call('HDEL', card_key(c.node, s[1]), uid) end
  redis.call('HDEL', P .. ':pods', uid)
  redis.call('HDEL', P .. ':pstate', uid)
  return true
end
local function write(raw, c, state)
  redis.call('HSET', P .. ':pods', c.uid, raw)
  redis.call('HSET', P .. ':pstate', c.uid, state .. '|' .. EPOCH)
  for _, index in ipairs(c.devices) do redis.call('HSET', P .. ':gpu:' .. c.node, index, c.uid) end
  for _, s in ipairs(c.shares) do
    redis.call('HSET', card_key(c.node, s[1]), c.uid,
      s[2] .. '|' .. s[3] .. '|' .. s[4] .. '|' .. s[5])
  end
end
-- Why the claim cannot be written next to what the store (and earlier claims of this call,
-- in `pending`) already hold; nil when it can.
local function problem(c, pending)
  for _, index in ipairs(c.devices) do
    local key = c.node .. '#' .. index
    local owner = redis.call('HGET', P .. ':gpu:' .. c.node, index) or pending[key]
    if owner and owner ~= c.uid then
      return 'GPU ' .. index .. ' on node ' .. c.node .. ' is held by pod UID ' .. owner
    end
    for _, u in ipairs(redis.call('HKEYS', card_key(c.node, index))) do
      if u ~= c.uid then
        return 'GPU ' .. index .. ' on node ' .. c.node .. ' is shared by other pods'
      end
    end
    if pending['shared#' .. key] then
      return 'GPU ' .. index .. ' on node ' .. c.node .. ' is shared by other pods'
    end
    pending[key] = c.uid
  end
  for _, s in ipairs(c.shares) do
    local index, core, mem, sgpu, qos, capmem, capsgpu = s[1], s[2], s[3], s[4], s[5], s[6], s[7]
    local key = c.node .. '#' .. index
    local owner = redis.call('HGET', P .. ':gpu:' .. c.node, index) or pending[key]
    if owner and owner ~= c.uid then
      return 'GPU ' .. index .. ' on node ' .. c.node .. ' is held whole by pod UID ' .. owner
    end
    local users = redis.call('HGETALL', card_key(c.node, index))
    local extra = pending['shared#' .. key] or {}
    for j = 1, #users, 2 do
      if users[j] ~= c.uid then table.insert(extra, users[j + 1]) end
    end
    local sc, sm, ss = core, mem, sgpu
    for _, v in ipairs(extra) do
      local uc, um, us, uq = string.match(v, '^(%-?%d+)|(%-?%d+)|(%-?%d+)|(.*)$')
      sc, sm, ss = sc + tonumber(uc), sm + tonumber(um), ss + tonumber(us)
      if qos ~= '' and uq ~= '' and uq ~= qos then
        return 'GPU ' .. index .. ' on node ' .. c.node .. ' serves QoS ' .. uq
      end
    end
    if sc > 100 or sm > capmem or ss > capsgpu then
      return 'GPU ' .. index .. ' on node ' .. c.node .. ' has no room for the share'
    end
    local mine = pending['shared#' .. key] or {}
    table.insert(mine, core .. '|' .. mem .. '|' .. sgpu .. '|' .. qos)
    pending['shared#' .. key] = mine
  end
  return nil
end
"""

_RESERVE = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local claims, pending = {}, {}
for i = 4, #ARGV do
  local c = cjson.decode(ARGV[i])
  -- A pod re-reserving replaces its own earlier claim: judge it without that claim.
  local why = problem(c, pending)
  if why then return redis.error_reply('CONFLICT ' .. why) end
  claims[#claims + 1] = {ARGV[i], c}
end
for _, item in ipairs(claims) do
  drop(item[2].uid)
  write(item[1], item[2], 'reserved')
end
return #claims
"""
)

_MARK_BOUND = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local n = 0
for i = 4, #ARGV do
  if redis.call('HEXISTS', P .. ':pods', ARGV[i]) == 1 then
    redis.call('HSET', P .. ':pstate', ARGV[i], 'bound|' .. EPOCH)
    n = n + 1
  end
end
return n
"""
)

_RELEASE = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local n = 0
for i = 4, #ARGV do if drop(ARGV[i]) then n = n + 1 end end
return n
"""
)

_RECONCILE = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
-- ARGV[4] = number of truth claims; then the claims; then the UIDs of pods still pending.
local truth, known, waiting = {}, {}, {}
local n = tonumber(ARGV[4])
for i = 5, 4 + n do
  local c = cjson.decode(ARGV[i])
  truth[#truth + 1] = {ARGV[i], c}
  known[c.uid] = true
end
for i = 5 + n, #ARGV do waiting[ARGV[i]] = true end
local freed, kept, added = 0, 0, 0
for _, uid in ipairs(redis.call('HKEYS', P .. ':pods')) do
  if not known[uid] then
    local st = redis.call('HGET', P .. ':pstate', uid) or ''
    local state, ep = string.match(st, '^(%a+)|(%d+)$')
    if state == 'reserved' and (ep == EPOCH or waiting[uid]) then
      kept = kept + 1
    else
      drop(uid)
      freed = freed + 1
    end
  end
end
local conflicts = {}
for _, item in ipairs(truth) do
  local raw, c = item[1], item[2]
  local st = redis.call('HGET', P .. ':pstate', c.uid) or ''
  if not (redis.call('HGET', P .. ':pods', c.uid) == raw and string.sub(st, 1, 6) == 'bound|') then
    drop(c.uid)
    local why = problem(c, {})
    if why then conflicts[#conflicts + 1] = 'pod ' .. c.pod .. ': ' .. why end
    write(raw, c, 'bound')
    added = added + 1
  end
end
local out = {added, freed, kept}
for _, v in ipairs(conflicts) do out[#out + 1] = v end
return out
"""
)

_ACQUIRE = r"""
local P, HOLDER, TTL = ARGV[1], ARGV[2], ARGV[3]
local cur = redis.call('GET', P .. ':lease')
if cur then
  local h, e = string.match(cur, '^(.*)|(%d+)$')
  if h == HOLDER then
    redis.call('PEXPIRE', P .. ':lease', TTL)
    return tonumber(e)
  end
  return false
end
local e = redis.call('INCR', P .. ':epoch')
redis.call('SET', P .. ':lease', HOLDER .. '|' .. e, 'PX', TTL)
return e
"""

_RENEW = (
    _PRELUDE
    + r"""
if not held() then return 0 end
redis.call('PEXPIRE', P .. ':lease', ARGV[4])
return 1
"""
)

_RELEASE_LEASE = (
    _PRELUDE
    + r"""
if held() then redis.call('DEL', P .. ':lease') end
return 1
"""
)

_encoder = msgspec.json.Encoder()
_claim_decoder = msgspec.json.Decoder(Claim)


class RedisStore:
    def __init__(self, client: aioredis.Redis, prefix: str = "topo-scheduler") -> None:
        self._r = client
        self.prefix = prefix
        self._reserve = client.register_script(_RESERVE)
        self._mark_bound = client.register_script(_MARK_BOUND)
        self._release = client.register_script(_RELEASE)
        self._reconcile = client.register_script(_RECONCILE)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release_lease = client.register_script(_RELEASE_LEASE)

    @classmethod
    def from_url(
        cls, url: str, prefix: str = "topo-scheduler", timeout_s: float = 2.0
    ) -> RedisStore:
        client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        return cls(client, prefix)

    async def _call(self, script: Any, args: list[Any]) -> Any:
        try:
            return await script(keys=[], args=args)
        except ResponseError as exc:
            text = str(exc)
            if text.startswith("FENCED"):
                raise Fenced(text.removeprefix("FENCED ")) from None
            if text.startswith("CONFLICT"):
                raise Conflict(text.removeprefix("CONFLICT ")) from None
            raise
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise Unavailable(f"redis: {exc}") from exc

    async def acquire(self, holder: str, ttl_ms: int) -> int | None:
        result = await self._call(self._acquire, [self.prefix, holder, ttl_ms])
        return None if result is None else int(result)

    async def renew(self, holder: str, epoch: int, ttl_ms: int) -> bool:
        return bool(await self._call(self._renew, [self.prefix, holder, epoch, ttl_ms]))

    async def release_lease(self, holder: str, epoch: int) -> None:
        await self._call(self._release_lease, [self.prefix, holder, epoch])

    async def reserve(self, holder: str, epoch: int, claims: list[Claim]) -> None:
        encoded = [_encoder.encode(c) for c in claims]
        await self._call(self._reserve, [self.prefix, holder, epoch, *encoded])

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None:
        await self._call(self._mark_bound, [self.prefix, holder, epoch, *uids])

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        await self._call(self._release, [self.prefix, holder, epoch, *uids])

    async def reconcile(
        self, holder: str, epoch: int, truth: list[Claim], pending: list[str]
    ) -> ReconcileReport:
        encoded = [_encoder.encode(c) for c in truth]
        args = [self.prefix, holder, epoch, len(encoded), *encoded, *pending]
        out = await self._call(self._reconcile, args)
        conflicts = tuple(_text(v) for v in out[3:])
        return ReconcileReport(int(out[0]), int(out[1]), int(out[2]), conflicts)

    async def records(self) -> dict[str, Record]:
        try:
            pods = await self._r.hgetall(f"{self.prefix}:pods")
            states = await self._r.hgetall(f"{self.prefix}:pstate")
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise Unavailable(f"redis: {exc}") from exc
        out: dict[str, Record] = {}
        for uid_b, raw in pods.items():
            uid = _text(uid_b)
            state, _, epoch = _text(states.get(uid_b, b"reserved|0")).partition("|")
            out[uid] = Record(_claim_decoder.decode(raw), state, int(epoch or 0))
        return out

    async def close(self) -> None:
        await self._r.aclose()


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
