#!/bin/sh
# Starts this pod's Redis (`start.sh redis`) or its Sentinel (`start.sh sentinel`).
#
# Both first ask the Sentinels which Redis is the master (after a failover it is not pod 0);
# when none answers (the first start of the set) pod 0's Redis is the master. Pods are named by
# their stable DNS names (the headless Service publishes them before they are ready), never by
# IP, which changes when a pod is recreated. The password is REDISCLI_AUTH (the Secret's
# `password`), which redis-cli reads itself, so it never appears on a command line.
set -eu
MASTER_NAME=topo-scheduler
SET=redis-sentinel
DOMAIN="$SET.topo-scheduler.svc"
ME="$HOSTNAME.$DOMAIN"

master=""
for i in 0 1 2; do
  answer=$(redis-cli -h "$SET-$i.$DOMAIN" -p 26379 --raw \
    SENTINEL get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n 1) || true
  case "$answer" in
    "$SET"-*) master="$answer"; break ;;
  esac
done
[ -n "$master" ] || master="$SET-0.$DOMAIN"

case "$1" in
redis)
  # min-replicas-to-write 1 / min-replicas-max-lag 3: a master that has heard from no replica
  # for 3 s refuses writes, so one cut off from the others (or paused and resumed) stops taking
  # writes before the Sentinels (down-after 5 s) promote a replica: docs/operations.md "State and HA".
  set -- --port 6379 --dir /data --appendonly yes --appendfsync everysec \
    --requirepass "$REDISCLI_AUTH" --masterauth "$REDISCLI_AUTH" \
    --replica-announce-ip "$ME" \
    --min-replicas-to-write 1 --min-replicas-max-lag 3
  [ "$master" = "$ME" ] || set -- "$@" --replicaof "$master" 6379
  exec redis-server "$@"
  ;;
sentinel)
  # Sentinel rewrites its config file: it lives in its own emptyDir (/sentinel). Quorum 2 of 3.
  cat > /sentinel/sentinel.conf <<CONF
port 26379
dir /sentinel
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $ME
requirepass $REDISCLI_AUTH
sentinel sentinel-pass $REDISCLI_AUTH
sentinel monitor $MASTER_NAME $master 6379 2
sentinel auth-pass $MASTER_NAME $REDISCLI_AUTH
sentinel down-after-milliseconds $MASTER_NAME 5000
sentinel failover-timeout $MASTER_NAME 30000
sentinel parallel-syncs $MASTER_NAME 1
CONF
  exec redis-server /sentinel/sentinel.conf --sentinel
  ;;
*)
  echo "usage: start.sh redis|sentinel" >&2
  exit 2
  ;;
esac
