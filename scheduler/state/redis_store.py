"""RedisStore: the store shared by several scheduler replicas.

Key layout (``P`` is the configurable prefix, default ``topo-scheduler``):

| key | type | holds |
|---|---|---|
| ``P:lease`` | string, PX ttl | ``<holder>|<epoch>`` of the current leader |
| ``P:epoch`` | integer | the last epoch handed out; INCR on every new leader |
| ``P:server`` | string | ``run_id`` of the Redis process that served the last election |
| ``P:leader`` | string | ``<holder>|<epoch>`` of the last election |
| ``P:pods`` | hash | pod UID -> the claim as JSON, exactly as Python encoded it |
| ``P:pstate`` | hash | pod UID -> ``reserved|<epoch>`` or ``bound|<epoch>`` |
| ``P:gpu:<node>`` | hash | GPU index -> ``<uid>|<gang>|<epoch>`` of the pod holding it whole |
| ``P:contested:<node>`` | hash | GPU index -> UIDs whose claim on it a later one was written over |
| ``P:card:<node>:<index>`` | hash | pod UID -> ``core|memoryMiB|sgpu|qos`` of its share |
| ``P:gang:<namespace/job>`` | hash | ``state``, ``epoch``, ``replicas``, ``members`` of a gang |
| ``P:gangs`` | set | every gang key that has a ``P:gang:`` record |
| ``P:nodes`` | hash | node name -> inventory JSON of each GPU node |
| ``P:nominations`` | hash | preemptor pod UID -> its ``Nomination`` as JSON, as Python encoded it |
| ``P:nomexpiry`` | sorted set | preemptor pod UID, scored by that nomination's ``expires_ms`` |

- ``P:gpu:<node>``: ``<gang>`` is the owner's gang key (``namespace/job``), empty without one;
  ``<epoch>`` is the epoch of the leader that wrote the ownership (``reserve`` or ``reconcile``).
  Readers take the UID as what precedes the first ``|`` (neither UIDs nor gang keys contain it).
  Versions before this layout stored the bare UID. This version reads those (gang ``""``,
  epoch 0), but those versions compare the whole value with a UID: they never free a GPU written
  in this format and refuse every reservation of it, even by its own pod. So a rollback to such a
  version (and an older replica that took the lease back mid-way through a rolling update) needs
  the owner hashes deleted once no newer replica runs: ``redis-cli --scan --pattern 'P:gpu:*' |
  xargs redis-cli del``, or simply FLUSHDB the scheduler's Redis database (the apiserver is the
  truth: the next leader's reconcile writes the store again from it). Those versions ignore gang
  records and ``P:nodes``.
- ``P:contested:<node>``: only an election reconcile writes two bound claims on one GPU (the
  apiserver's pods as a lagging replica has them: a stale one and the real one); the later
  becomes the owner and the earlier is listed here. When the owner is released, the GPU goes
  to the latest one listed whose record still names it (an entry whose record is gone or moved
  is dropped then): a release removes only its own ownership, never another record's claim.
- ``P:gang:<namespace/job>``: ``state`` is ``reserved``, ``bound`` or ``partial`` (base.py),
  ``epoch`` the epoch of the call that last wrote the record, ``replicas`` the gang's replica
  count (0 = unknown), ``members`` the member pod UIDs, sorted and comma-separated.
- ``P:nodes``: the inventory the scheduler read, in the ``topo-scheduler.io/gpus`` shape with
  ``scores`` (scheduler/service/inventories.py).
- ``P:nominations`` and ``P:nomexpiry`` (base.py's nominations): the same UIDs in both, written
  and deleted together by the nomination scripts only (``nominate``, ``drop_nominations``); the
  JSON's fields are ``uid``, ``pod``, ``priority``, ``node``, ``devices`` (whole GPU indices),
  ``victims`` (UIDs), ``created_ms`` and ``expires_ms`` (unix milliseconds). The sorted set
  finds the expired ones (score <= the caller's ``now_ms``) without reading the hash: each call
  deletes at most ``chunk`` of them, earliest first. Readers filter by ``expires_ms`` as well, so
  an expired nomination that no write has deleted yet is never returned. ``reconcile`` does not
  touch either key; nothing else expires them (no Redis TTL: expiry is the caller's clock, not
  Redis's), and a FLUSHALL loses them (the service derives them again). Both keys vanish when the
  last nomination goes.

- ``P:server`` and ``P:leader``: written by ``kept_history`` (once per election, fenced) with
  the election's ``holder|epoch`` and the ``run_id`` of
  the Redis process the script runs on (``INFO server``); a different one there means the data
  outlived the process that wrote them (a restart from disk, or a replica promoted by Sentinel),
  so the last writes before the change may be lost: the caller waits as after a FLUSHALL.
  ``P:settled``: the ``holder|epoch`` ``mark_settled`` marked (its leader's wait over); the
  next ``kept_history`` says whether it names the election it reads, and deletes it.

Every change touching several keys is one Lua script (``reconcile``: a sequence of them, below),
and each script begins with the same fence:
the lease key must hold exactly the caller's ``holder|epoch``. A deposed leader (another holder got
the lease) and a leader whose lease lapsed (it could not renew) are both refused at the moment of
the write, whatever their own clocks say. Holder names are unique per process, so even a flushed
Redis that restarts epochs at 1 cannot confuse two leaders.

A gang record is derived from its members' pod records and rewritten (``settle``) in the same
script as any change to them: ``reserve``/``reserve_each`` (a member joins: ``reserved``),
``mark_bound`` (the last member bound: ``bound``), ``release`` (the last member freed: the record
is deleted).
``reconcile`` deletes every gang record and rebuilds them from ``P:pods``.

``reconcile`` handles the whole store (100,000 bound pods after a takeover), so it runs as fenced
calls of at most ``chunk`` items (``RECONCILE_CHUNK``), with HSCAN/SSCAN reads between them: no
single call blocks Redis, or outlasts the client's socket timeout, however big the store; and
the leader renews its lease while it runs (service/leader.py). Each step is fenced, and each
leaves the current epoch's reservations alone, so the steps need not be one transaction.

A nomination costs one call to write (``nominate``, which also deletes the expired ones) and one
to drop; neither runs on a pod's ordinary path, only when a preemptor's victims are chosen and
when that preemptor binds, goes or is given up.

A pod's path has two writes: its reservation before the bind, ``mark_bound`` after. Neither is
a call per pod under load: the cycle reserves a batch of units (pods, gangs) in one
``reserve_each`` call (one script, each unit all or nothing on its own, one reason back per
unit, '' when written), and the marks of the binds that completed meanwhile go in one
``mark_bound`` call. Node inventories are written on node
events only (``update_nodes``, batched by the caller) and by ``reconcile``.
Scripts run through redis-py's ``register_script`` (EVALSHA, reloaded after a Redis restart).
Keys are computed inside the scripts, so this needs one Redis (or a replicated primary), not a
Redis Cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import RedisError, ResponseError

from .base import (
    Claim,
    Fenced,
    GangRecord,
    History,
    Nomination,
    Owner,
    ReconcileReport,
    Record,
    ReservesUnits,
    Unavailable,
)
from .sentinel import SENTINEL_TIMEOUT_S, sentinel_client

T = TypeVar("T")

_PRELUDE = r"""
local P, HOLDER, EPOCH = ARGV[1], ARGV[2], ARGV[3]
local PODS, PSTATE, GANGS = P .. ':pods', P .. ':pstate', P .. ':gangs'
local function held()
  return redis.call('GET', P .. ':lease') == HOLDER .. '|' .. EPOCH
end
local function fenced()
  return redis.error_reply('FENCED lease is ' .. tostring(redis.call('GET', P .. ':lease')) ..
    ', caller ' .. HOLDER .. '|' .. EPOCH)
end
local function card_key(node, index) return P .. ':card:' .. node .. ':' .. index end
local function gpu_key(node) return P .. ':gpu:' .. node end
local function gang_key(gang) return P .. ':gang:' .. gang end
-- A P:gpu:<node> value is `<uid>|<gang>|<epoch>`: the owner's UID is what precedes the first '|'.
local function owner_of(node, index)
  local v = redis.call('HGET', gpu_key(node), index)
  if not v then return nil end
  return (string.match(v, '^([^|]*)'))
end
local function split(s)
  local out = {}
  if s then for u in string.gmatch(s, '[^,]+') do out[#out + 1] = u end end
  return out
end
-- Gangs whose members changed in this call; settle_touched() rewrites their records at the end.
local touched = {}
local function join_gang(gang, uid)
  touched[gang] = true
  local members = split(redis.call('HGET', gang_key(gang), 'members'))
  for _, u in ipairs(members) do if u == uid then return end end
  members[#members + 1] = uid
  table.sort(members)
  redis.call('HSET', gang_key(gang), 'members', table.concat(members, ','))
end
local function leave_gang(gang, uid)
  touched[gang] = true
  local kept = {}
  for _, u in ipairs(split(redis.call('HGET', gang_key(gang), 'members'))) do
    if u ~= uid then kept[#kept + 1] = u end
  end
  if #kept > 0 then
    redis.call('HSET', gang_key(gang), 'members', table.concat(kept, ','))
  else
    -- Never create a record just to empty it (a pod written before gang records existed).
    redis.call('HDEL', gang_key(gang), 'members')
  end
end
-- A gang's record follows from its members' records: reserved while any member is only
-- reserved; else bound when there are at least `replicas` members; else partial. No members:
-- no record.
local function settle(gang)
  local key = gang_key(gang)
  local members, replicas, reserved = {}, 0, false
  for _, uid in ipairs(split(redis.call('HGET', key, 'members'))) do
    local raw = redis.call('HGET', PODS, uid)
    if raw then
      members[#members + 1] = uid
      replicas = math.max(replicas, tonumber(cjson.decode(raw).replicas or 0) or 0)
      if string.sub(redis.call('HGET', PSTATE, uid) or '', 1, 6) ~= 'bound|' then
        reserved = true
      end
    end
  end
  if #members == 0 then
    redis.call('DEL', key)
    redis.call('SREM', GANGS, gang)
    return
  end
  local state = 'bound'
  if reserved then state = 'reserved' elseif #members < replicas then state = 'partial' end
  redis.call('HSET', key, 'state', state, 'epoch', EPOCH, 'replicas', replicas,
    'members', table.concat(members, ','))
  redis.call('SADD', GANGS, gang)
end
local function settle_touched()
  local gangs = {}
  for gang in pairs(touched) do gangs[#gangs + 1] = gang end
  table.sort(gangs)
  for _, gang in ipairs(gangs) do settle(gang) end
  touched = {}
end
-- GPU `index` of `node` lost its owner (released): it goes to the latest claim written over
-- on it (P:contested) whose record still names it. A release removes only its own ownership.
local function contested_key(node) return P .. ':contested:' .. node end
local function succeed(node, index)
  local list = redis.call('HGET', contested_key(node), index)
  if not list then return end
  redis.call('HDEL', contested_key(node), index)
  local waiting = split(list)
  while #waiting > 0 do
    local u = table.remove(waiting)
    local raw = redis.call('HGET', PODS, u)
    local c = raw and cjson.decode(raw)
    if c and c.node == node then
      for _, i in ipairs(c.devices) do
        if tostring(i) == tostring(index) then
          local epoch = string.match(redis.call('HGET', PSTATE, u) or '', '|(%d+)$') or EPOCH
          redis.call('HSET', gpu_key(node), index, u .. '|' .. (c.gang or '') .. '|' .. epoch)
          if #waiting > 0 then
            redis.call('HSET', contested_key(node), index, table.concat(waiting, ','))
          end
          return
        end
      end
    end
  end
end
local function drop(uid)
  local raw = redis.call('HGET', PODS, uid)
  if not raw then return false end
  local c = cjson.decode(raw)
  for _, index in ipairs(c.devices) do
    if owner_of(c.node, index) == uid then
      redis.call('HDEL', gpu_key(c.node), index)
      succeed(c.node, index)
    end
  end
  for _, s in ipairs(c.shares) do redis.call('HDEL', card_key(c.node, s[1]), uid) end
  redis.call('HDEL', PODS, uid)
  redis.call('HDEL', PSTATE, uid)
  if c.gang and c.gang ~= '' then leave_gang(c.gang, uid) end
  return true
end
local function write(raw, c, state)
  local gang = c.gang or ''
  redis.call('HSET', PODS, c.uid, raw)
  redis.call('HSET', PSTATE, c.uid, state .. '|' .. EPOCH)
  for _, index in ipairs(c.devices) do
    local before = owner_of(c.node, index)
    if before and before ~= c.uid then
      local list = redis.call('HGET', contested_key(c.node), index)
      redis.call('HSET', contested_key(c.node), index, list and (list .. ',' .. before) or before)
    end
    redis.call('HSET', gpu_key(c.node), index, c.uid .. '|' .. gang .. '|' .. EPOCH)
  end
  for _, s in ipairs(c.shares) do
    redis.call('HSET', card_key(c.node, s[1]), c.uid,
      s[2] .. '|' .. s[3] .. '|' .. s[4] .. '|' .. s[5])
  end
  if gang ~= '' then join_gang(gang, c.uid) end
end
-- Why the claim cannot be written next to what the store (and earlier claims of this call,
-- in `pending`) already hold; nil when it can. What the store holds for a UID in `mine` (the
-- pods of the claim's own unit, whose records the write replaces) does not count.
local function problem(c, pending, mine)
  mine = mine or {[c.uid] = true}
  for _, index in ipairs(c.devices) do
    local key = c.node .. '#' .. index
    local owner = owner_of(c.node, index)
    if owner and mine[owner] then owner = nil end
    owner = owner or pending[key]
    if owner and owner ~= c.uid then
      return 'GPU ' .. index .. ' on node ' .. c.node .. ' is held by pod UID ' .. owner
    end
    for _, u in ipairs(redis.call('HKEYS', card_key(c.node, index))) do
      if not mine[u] then
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
    local owner = owner_of(c.node, index)
    if owner and mine[owner] then owner = nil end
    owner = owner or pending[key]
    if owner and owner ~= c.uid then
      return 'GPU ' .. index .. ' on node ' .. c.node .. ' is held whole by pod UID ' .. owner
    end
    local users = redis.call('HGETALL', card_key(c.node, index))
    -- A copy: the store's users must not join `pending` (a later claim would count them twice).
    local extra = {}
    for _, v in ipairs(pending['shared#' .. key] or {}) do extra[#extra + 1] = v end
    for j = 1, #users, 2 do
      if not mine[users[j]] then table.insert(extra, users[j + 1]) end
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

# ARGV[4..]: per unit, the number n of its claims, then its n claims as JSON. Each unit is all or
# nothing on its own, judged against the store as the units before it left it. Returns one string
# per unit: '' when it was written, else why not.
_RESERVE_EACH = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local out, i = {}, 4
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local claims, pending, mine, why = {}, {}, {}, nil
  for j = i + 1, i + n do
    local c = cjson.decode(ARGV[j])
    claims[#claims + 1] = {ARGV[j], c}
    mine[c.uid] = true
  end
  -- The unit's pods re-reserving replace their own earlier claims (a gang decided afresh after
  -- a failover may swap its members' GPUs): judge it without those claims, drop them all, then
  -- write the new ones.
  for _, item in ipairs(claims) do
    why = problem(item[2], pending, mine)
    if why then break end
  end
  if why then
    out[#out + 1] = why
  else
    for _, item in ipairs(claims) do drop(item[2].uid) end
    -- (This drop only meets a claim of the same pod written just before.)
    for _, item in ipairs(claims) do
      drop(item[2].uid)
      write(item[1], item[2], 'reserved')
    end
    out[#out + 1] = ''
  end
  i = i + 1 + n
end
settle_touched()
return out
"""
)

_MARK_BOUND = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local n = 0
for i = 4, #ARGV do
  local raw = redis.call('HGET', PODS, ARGV[i])
  if raw then
    redis.call('HSET', PSTATE, ARGV[i], 'bound|' .. EPOCH)
    local gang = cjson.decode(raw).gang
    if gang and gang ~= '' then touched[gang] = true end
    n = n + 1
  end
end
settle_touched()
return n
"""
)

_RELEASE = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local n = 0
for i = 4, #ARGV do if drop(ARGV[i]) then n = n + 1 end end
settle_touched()
return n
"""
)

# ---- reconcile, in chunks ---------------------------------------------------------------------
# One Lua call blocks Redis while it runs (and the caller's socket timeout runs out at about
# 20,000 bound pods), so ``reconcile`` is a sequence of fenced calls of at most ``chunk`` items
# each: every call checks the lease, so a leader deposed half-way stops at its next chunk.

# ARGV[4..]: UIDs the truth does not back, each prefixed `w` (a pending pod: its reservation is
# kept, whatever its epoch: the caller names its own binds in flight so) or `-`. Everything else
# is dropped.
_RECONCILE_FREE = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local freed, kept = 0, 0
for i = 4, #ARGV do
  local waiting, uid = string.sub(ARGV[i], 1, 1) == 'w', string.sub(ARGV[i], 2)
  local st = redis.call('HGET', PSTATE, uid)
  if st then
    local state = string.match(st, '^(%a+)|%d+$')
    if state == 'reserved' and waiting then
      kept = kept + 1
    elseif drop(uid) then
      freed = freed + 1
    end
  elseif drop(uid) then
    freed = freed + 1
  end
end
settle_touched()
return {freed, kept}
"""
)

# ARGV[4..]: truth claims. Each one not already recorded exactly, as bound, is written as bound.
_RECONCILE_TRUTH = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local added, out = 0, {}
for i = 4, #ARGV do
  local raw = ARGV[i]
  local c = cjson.decode(raw)
  local st = redis.call('HGET', PSTATE, c.uid) or ''
  if not (redis.call('HGET', PODS, c.uid) == raw and string.sub(st, 1, 6) == 'bound|') then
    drop(c.uid)
    local why = problem(c, {})
    if why then out[#out + 1] = 'pod ' .. c.pod .. ': ' .. why end
    write(raw, c, 'bound')
    added = added + 1
  end
end
settle_touched()
table.insert(out, 1, added)
return out
"""
)

# ARGV[4..]: gang keys whose records are deleted (the rebuild writes them again).
_RECONCILE_GANGS_CLEAR = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
for i = 4, #ARGV do
  redis.call('DEL', gang_key(ARGV[i]))
  redis.call('SREM', GANGS, ARGV[i])
end
return 1
"""
)

# ARGV[4..]: gang key, comma-separated member UIDs, ... Members are added to whatever record a
# reservation made since the clear, and settle() keeps only those that still have a pod record.
_RECONCILE_GANGS_SET = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
for i = 4, #ARGV, 2 do
  for _, uid in ipairs(split(ARGV[i + 1])) do join_gang(ARGV[i], uid) end
end
settle_touched()
return 1
"""
)

# ARGV[4..]: names whose inventory is dropped, each prefixed `-`; or name, inventory pairs to
# write where they differ, each name prefixed `+`.
_RECONCILE_NODES = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local i = 4
while i <= #ARGV do
  local op, name = string.sub(ARGV[i], 1, 1), string.sub(ARGV[i], 2)
  if op == '-' then
    redis.call('HDEL', P .. ':nodes', name)
    i = i + 1
  else
    if redis.call('HGET', P .. ':nodes', name) ~= ARGV[i + 1] then
      redis.call('HSET', P .. ':nodes', name, ARGV[i + 1])
    end
    i = i + 2
  end
end
return 1
"""
)

_UPDATE_NODES = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
-- ARGV[4] = number of inventories to write, then name, inventory pairs; then names to drop.
local k = tonumber(ARGV[4])
for i = 5, 4 + 2 * k, 2 do redis.call('HSET', P .. ':nodes', ARGV[i], ARGV[i + 1]) end
for i = 5 + 2 * k, #ARGV do redis.call('HDEL', P .. ':nodes', ARGV[i]) end
return 1
"""
)

# ---- nominations (base.py): P:nominations (UID -> JSON) and P:nomexpiry (UID by expires_ms) ----
# ARGV[4] = now_ms ('' for none: no pruning), ARGV[5] = the most expired nominations deleted.
_NOMINATIONS = r"""
local NOMS, NOMEXPIRY = P .. ':nominations', P .. ':nomexpiry'
local NOW, PRUNE = ARGV[4], tonumber(ARGV[5])
local function forget_nomination(uid)
  redis.call('HDEL', NOMS, uid)
  redis.call('ZREM', NOMEXPIRY, uid)
end
-- Delete the nominations expired at NOW (expires_ms <= NOW), at most PRUNE of them.
local function prune_nominations()
  if NOW == '' then return end
  local expired = redis.call('ZRANGEBYSCORE', NOMEXPIRY, '-inf', NOW, 'LIMIT', 0, PRUNE)
  for _, uid in ipairs(expired) do forget_nomination(uid) end
end
"""

# ARGV[6] = the preemptor's UID, ARGV[7] its expires_ms, ARGV[8] the nomination as JSON. An earlier
# nomination of that UID is replaced; one already expired at NOW is not written.
_NOMINATE = (
    _PRELUDE
    + _NOMINATIONS
    + r"""
if not held() then return fenced() end
local uid, expires = ARGV[6], ARGV[7]
prune_nominations()
if tonumber(expires) > tonumber(NOW) then
  -- Replaces the UID's earlier nomination, if any (one field, one member per UID).
  redis.call('HSET', NOMS, uid, ARGV[8])
  redis.call('ZADD', NOMEXPIRY, expires, uid)
else
  forget_nomination(uid)
end
return 1
"""
)

# ARGV[6..]: the preemptor UIDs whose nominations are deleted.
_DROP_NOMINATIONS = (
    _PRELUDE
    + _NOMINATIONS
    + r"""
if not held() then return fenced() end
for i = 6, #ARGV do forget_nomination(ARGV[i]) end
prune_nominations()
return 1
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

# {1 when P:server names this Redis process, else 0; P:leader; 1 when P:settled names that
# election, else 0}; then P:server and P:leader name this election, not settled.
_KEPT_HISTORY = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
local before = redis.call('GET', P .. ':server')
local previous = redis.call('GET', P .. ':leader') or ''
local settled = 0
if previous ~= '' and redis.call('GET', P .. ':settled') == previous then settled = 1 end
redis.call('SET', P .. ':server', id)
redis.call('SET', P .. ':leader', HOLDER .. '|' .. EPOCH)
redis.call('DEL', P .. ':settled')
if before == id then return {1, previous, settled} end
return {0, previous, settled}
"""
)

_MARK_SETTLED = (
    _PRELUDE
    + r"""
if not held() then return fenced() end
redis.call('SET', P .. ':settled', HOLDER .. '|' .. EPOCH)
return 1
"""
)

RECONCILE_CHUNK = 2000
"""Items per fenced reconcile call, by default (the setting run.tuning.storeReconcileChunk).
2,000 claims take Redis about 40 ms on a loaded 2-core machine (a claim: a JSON decode, a few
hash writes); short enough that the replica's other calls (lease renewals) and the standbys' are
never held up long, long enough that 100,000 bound pods are 50 round trips."""

REDIS_TIMEOUT_S = 2.0
"""How long a Redis call may take before it counts as failed, by default (the setting
run.tuning.redisTimeoutSeconds): well below a lease's duration, so a leader whose Redis stalls
learns it while its lease still holds."""

_encoder = msgspec.json.Encoder()
_claim_decoder = msgspec.json.Decoder(Claim)
_nomination_decoder = msgspec.json.Decoder(Nomination)


class RedisStore(ReservesUnits):
    """``replicas_to_ack`` > 0 (through Sentinels: 1): an acquisition or renewal of the lease
    counts only once that many replicas acknowledged it (``WAIT`` on the same connection, at
    most ``ack_timeout_ms``); else it raises Unavailable, as if Redis had not answered."""

    def __init__(
        self,
        client: aioredis.Redis,
        prefix: str = "topo-scheduler",
        chunk: int = RECONCILE_CHUNK,
        replicas_to_ack: int = 0,
        ack_timeout_ms: int = 1000,
        sentinels: Sentinel | None = None,
    ) -> None:
        self._r = client
        self._sentinels = sentinels
        self.prefix = prefix
        self.chunk = chunk
        self.replicas_to_ack = replicas_to_ack
        self.ack_timeout_ms = ack_timeout_ms
        self.reconcile_calls = 0  # fenced calls made by reconciles so far (tests, benchmarks)
        self._reserve_each = client.register_script(_RESERVE_EACH)
        self._mark_bound = client.register_script(_MARK_BOUND)
        self._release = client.register_script(_RELEASE)
        self._reconcile_free = client.register_script(_RECONCILE_FREE)
        self._reconcile_truth = client.register_script(_RECONCILE_TRUTH)
        self._reconcile_gangs_clear = client.register_script(_RECONCILE_GANGS_CLEAR)
        self._reconcile_gangs_set = client.register_script(_RECONCILE_GANGS_SET)
        self._reconcile_nodes = client.register_script(_RECONCILE_NODES)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release_lease = client.register_script(_RELEASE_LEASE)
        self._kept_history = client.register_script(_KEPT_HISTORY)
        self._mark_settled = client.register_script(_MARK_SETTLED)
        self._update_nodes = client.register_script(_UPDATE_NODES)
        self._nominate = client.register_script(_NOMINATE)
        self._drop_nominations = client.register_script(_DROP_NOMINATIONS)

    @classmethod
    def from_url(
        cls,
        url: str,
        prefix: str = "topo-scheduler",
        timeout_s: float = REDIS_TIMEOUT_S,
        chunk: int = RECONCILE_CHUNK,
    ) -> RedisStore:
        client = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        return cls(client, prefix, chunk)

    @classmethod
    def from_sentinels(
        cls,
        master_name: str,
        addresses: tuple[str, ...],
        url: str,
        prefix: str = "topo-scheduler",
        timeout_s: float = REDIS_TIMEOUT_S,
        chunk: int = RECONCILE_CHUNK,
        sentinel_timeout_s: float = SENTINEL_TIMEOUT_S,
    ) -> RedisStore:
        """The master named ``master_name`` through its Sentinels (sentinel.py); every lease
        acquisition and renewal waits for one replica's acknowledgement."""
        client, sentinels = sentinel_client(
            master_name, addresses, url, timeout_s, sentinel_timeout_s
        )
        # WAIT's own timeout ends well before the socket's (else a missing acknowledgement
        # reads as a lost connection).
        ack_ms = int(timeout_s * 500)
        return cls(
            client, prefix, chunk, replicas_to_ack=1, ack_timeout_ms=ack_ms, sentinels=sentinels
        )

    async def _call(self, script: Any, args: list[Any]) -> Any:
        try:
            return await script(keys=[], args=args)
        except ResponseError as exc:
            text = str(exc)
            if text.startswith("FENCED"):
                raise Fenced(text.removeprefix("FENCED ")) from None
            # BUSY, OOM, READONLY, a script's runtime error...: the call failed on Redis's side.
            # Callers see one family, StoreError, as for a lost connection; the leader's next
            # reconcile repairs whatever the call did or did not write.
            raise await self._unavailable(text) from exc
        except (RedisError, OSError) as exc:
            raise Unavailable(f"redis: {exc}") from exc

    async def _unavailable(self, text: str, cut_off: bool = False) -> Unavailable:
        """The error for a failed call. Through Sentinels, a master that refuses writes for
        want of replicas (NOREPLICAS), or whose write no replica acknowledged (``cut_off``), may
        be an old master (paused, partitioned) that the Sentinels have replaced: the client's
        connections to it are dropped, so the next call asks the Sentinels again. (redis-py
        does so itself only for READONLY, once the old master has been made a replica.)"""
        if self._sentinels is not None and (cut_off or "NOREPLICAS" in text):
            await self._r.connection_pool.disconnect()
        return Unavailable(f"redis: {text}")

    async def _acked(self, script: Any, args: list[Any], what: str) -> Any:
        """``script``, then (with ``replicas_to_ack``) ``WAIT`` on the same connection: the
        answer counts only once enough replicas hold what the script wrote. A Sentinel may
        promote any replica, so a lease no replica has could vanish with the master."""
        if not self.replicas_to_ack:
            return await self._call(script, args)
        try:
            async with self._r.pipeline(transaction=False) as pipe:
                await script(keys=[], args=args, client=pipe)
                pipe.wait(self.replicas_to_ack, self.ack_timeout_ms)
                result, acked = await pipe.execute()
        except (RedisError, OSError) as exc:  # NOREPLICAS, READONLY, a lost connection...
            raise await self._unavailable(str(exc)) from exc
        if int(acked) < self.replicas_to_ack:
            raise await self._unavailable(
                f"the lease {what} reached {acked} replicas within {self.ack_timeout_ms} ms "
                f"(WAIT {self.replicas_to_ack}): it does not count",
                cut_off=True,
            )
        return result

    async def acquire(self, holder: str, ttl_ms: int) -> int | None:
        result = await self._acked(self._acquire, [self.prefix, holder, ttl_ms], "acquisition")
        return None if result is None else int(result)

    async def renew(self, holder: str, epoch: int, ttl_ms: int) -> bool:
        args = [self.prefix, holder, epoch, ttl_ms]
        return bool(await self._acked(self._renew, args, "renewal"))

    async def kept_history(self, holder: str, epoch: int) -> History:
        kept, previous, settled = await self._call(self._kept_history, [self.prefix, holder, epoch])
        return History(bool(kept), _text(previous), bool(settled))

    async def mark_settled(self, holder: str, epoch: int) -> None:
        await self._call(self._mark_settled, [self.prefix, holder, epoch])

    async def release_lease(self, holder: str, epoch: int) -> None:
        await self._call(self._release_lease, [self.prefix, holder, epoch])

    async def reserve_each(
        self, holder: str, epoch: int, units: list[list[Claim]]
    ) -> list[str | None]:
        args: list[Any] = [self.prefix, holder, epoch]
        for claims in units:
            args.append(len(claims))
            args += [_encoder.encode(c) for c in claims]
        out = await self._call(self._reserve_each, args)
        return [_text(v) or None for v in out]

    async def mark_bound(self, holder: str, epoch: int, uids: list[str]) -> None:
        await self._call(self._mark_bound, [self.prefix, holder, epoch, *uids])

    async def release(self, holder: str, epoch: int, uids: list[str]) -> None:
        await self._call(self._release, [self.prefix, holder, epoch, *uids])

    async def reconcile(
        self,
        holder: str,
        epoch: int,
        truth: list[Claim],
        pending: list[str],
        nodes: dict[str, str] | None = None,
    ) -> ReconcileReport:
        """base.py's reconcile, as a sequence of fenced calls of at most ``chunk`` items:
        1. free the records the truth does not back (keeping only the reservations of the
        ``pending`` UIDs the caller names); 2. write the truth's claims; 3. rebuild every gang
        record from the pod records; 4. replace the inventories (when ``nodes`` is given). The
        reads between them (which UIDs, gangs and nodes the store holds) are HSCAN/SSCAN
        batches, so no single command walks 100,000 entries either. The store is the leader's
        alone while it reconciles (a new leader reconciles before its first decision; later
        reconciles run beside its own reservations, which the caller names as pending, and it
        sends no mark or release until this returns: base.py), so the steps need not be one
        transaction: what matters is that each is fenced."""
        prefix = self.prefix
        known = {c.uid for c in truth}
        waiting = set(pending)
        stale = [
            ("w" if uid in waiting else "-") + uid
            async for uid in self._scan_keys(f"{prefix}:pods")
            if uid not in known
        ]
        freed = kept = added = 0
        conflicts: list[str] = []
        for part in _chunks(stale, self.chunk):
            out = await self._fenced(self._reconcile_free, holder, epoch, part)
            freed, kept = freed + int(out[0]), kept + int(out[1])
        encoded = [_encoder.encode(c) for c in truth]
        for claims in _chunks(encoded, self.chunk):
            out = await self._fenced(self._reconcile_truth, holder, epoch, claims)
            added += int(out[0])
            conflicts += [_text(v) for v in out[1:]]
        await self._rebuild_gangs(holder, epoch)
        if nodes is not None:
            ops = [
                "-" + name async for name in self._scan_keys(f"{prefix}:nodes") if name not in nodes
            ]
            for name, inventory in sorted(nodes.items()):
                ops += ["+" + name, inventory]
            for part in _node_chunks(ops, self.chunk):
                await self._fenced(self._reconcile_nodes, holder, epoch, part)
        return ReconcileReport(added, freed, kept, tuple(conflicts))

    async def _rebuild_gangs(self, holder: str, epoch: int) -> None:
        """Delete every listed gang record, then write each gang's members as the pod records
        say. Every earlier step settled what it touched, so each gang record it left is listed."""
        listed = [name async for name in self._scan_members(f"{self.prefix}:gangs")]
        for part in _chunks(listed, self.chunk):
            await self._fenced(self._reconcile_gangs_clear, holder, epoch, part)
        members: dict[str, list[str]] = {}
        async for uid, raw in self._scan_items(f"{self.prefix}:pods"):
            gang = _claim_decoder.decode(raw).gang
            if gang:
                members.setdefault(gang, []).append(uid)
        pairs: list[str] = []
        for gang in sorted(members):
            pairs += [gang, ",".join(sorted(members[gang]))]
        size = max(2, self.chunk - self.chunk % 2)
        for part in _chunks(pairs, size):
            await self._fenced(self._reconcile_gangs_set, holder, epoch, part)

    async def _fenced(self, script: Any, holder: str, epoch: int, items: list[Any]) -> Any:
        self.reconcile_calls += 1
        return await self._call(script, [self.prefix, holder, epoch, *items])

    async def _scan_keys(self, key: str) -> AsyncIterator[str]:
        async for field, _ in self._scan_items(key):
            yield field

    async def _scan_items(self, key: str) -> AsyncIterator[tuple[str, bytes]]:
        cursor = 0
        while True:
            try:
                cursor, batch = await self._r.hscan(key, cursor, count=self.chunk)
            except (RedisError, OSError) as exc:
                raise Unavailable(f"redis: {exc}") from exc
            assert isinstance(batch, dict)
            for field, value in batch.items():
                yield _text(field), value if isinstance(value, bytes) else value.encode()
            if not cursor:
                return

    async def _scan_members(self, key: str) -> AsyncIterator[str]:
        cursor = 0
        while True:
            try:
                cursor, batch = await self._r.sscan(key, cursor, count=self.chunk)
            except (RedisError, OSError) as exc:
                raise Unavailable(f"redis: {exc}") from exc
            for member in batch:
                yield _text(member)
            if not cursor:
                return

    async def update_nodes(
        self, holder: str, epoch: int, put: dict[str, str], drop: list[str]
    ) -> None:
        args: list[Any] = [self.prefix, holder, epoch, len(put)]
        for name, inventory in sorted(put.items()):
            args += [name, inventory]
        await self._call(self._update_nodes, [*args, *drop])

    async def nominate(self, holder: str, epoch: int, nomination: Nomination, now_ms: int) -> None:
        args = [self.prefix, holder, epoch, now_ms, self.chunk]
        args += [nomination.uid, nomination.expires_ms, _encoder.encode(nomination)]
        await self._call(self._nominate, args)

    async def drop_nominations(
        self, holder: str, epoch: int, uids: list[str], now_ms: int | None = None
    ) -> None:
        now = "" if now_ms is None else now_ms
        await self._call(
            self._drop_nominations, [self.prefix, holder, epoch, now, self.chunk, *uids]
        )

    async def nominations(self, now_ms: int) -> dict[str, Nomination]:
        raw = await self._read(self._r.hgetall(f"{self.prefix}:nominations"))
        out: dict[str, Nomination] = {}
        for uid, value in raw.items():
            nomination = _nomination_decoder.decode(value)
            if nomination.expires_ms > now_ms:
                out[_text(uid)] = nomination
        return out

    async def _read(self, command: Any) -> Any:
        try:
            return await command
        except (RedisError, OSError) as exc:  # connection, timeout, BUSY, LOADING, WRONGTYPE...
            raise Unavailable(f"redis: {exc}") from exc

    async def records(self) -> dict[str, Record]:
        async with self._r.pipeline(transaction=True) as pipe:
            pipe.hgetall(f"{self.prefix}:pods")
            pipe.hgetall(f"{self.prefix}:pstate")
            pods, states = await self._read(pipe.execute())
        out: dict[str, Record] = {}
        for uid_b, raw in pods.items():
            uid = _text(uid_b)
            state, _, epoch = _text(states.get(uid_b, b"reserved|0")).partition("|")
            out[uid] = Record(_claim_decoder.decode(raw), state, int(epoch or 0))
        return out

    async def gangs(self) -> dict[str, GangRecord]:
        names = await self._read(self._r.smembers(f"{self.prefix}:gangs"))
        if not names:
            return {}
        async with self._r.pipeline(transaction=True) as pipe:
            ordered = sorted(_text(n) for n in names)
            for name in ordered:
                pipe.hgetall(f"{self.prefix}:gang:{name}")
            rows = await self._read(pipe.execute())
        out: dict[str, GangRecord] = {}
        for name, row in zip(ordered, rows, strict=True):
            if not row:
                continue  # deleted between the two reads
            fields = {_text(k): _text(v) for k, v in row.items()}
            members = tuple(u for u in fields.get("members", "").split(",") if u)
            out[name] = GangRecord(
                fields.get("state", ""),
                int(fields.get("epoch") or 0),
                members,
                int(fields.get("replicas") or 0),
            )
        return out

    async def owners(self, node: str) -> dict[int, Owner]:
        raw = await self._read(self._r.hgetall(f"{self.prefix}:gpu:{node}"))
        out: dict[int, Owner] = {}
        for index, value in raw.items():
            uid, _, rest = _text(value).partition("|")
            gang, _, epoch = rest.rpartition("|")
            out[int(index)] = Owner(uid, gang, int(epoch or 0))
        return out

    async def nodes(self) -> dict[str, str]:
        raw = await self._read(self._r.hgetall(f"{self.prefix}:nodes"))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def close(self) -> None:
        await self._r.aclose()
        if self._sentinels is not None:
            await self._sentinels.aclose()


def _chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _node_chunks(ops: list[str], size: int) -> Iterator[list[str]]:
    """``ops`` (``-name`` or ``+name``, inventory) in parts of about ``size`` items that never
    split a name from its inventory."""
    part: list[str] = []
    i = 0
    while i < len(ops):
        step = 1 if ops[i].startswith("-") else 2
        part += ops[i : i + step]
        i += step
        if len(part) >= size:
            yield part
            part = []
    if part:
        yield part


def _text(value: bytes | str | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
