#!/usr/bin/env bash
# Integration: /metrics tells whether an acknowledged order survives a crash of the
# data Redis (seckill_redis_durable), read from Redis's persistence settings at
# start-up and again when Redis comes back.
#
#   - AOF with appendfsync always: the gauge is 1, no level=warn line;
#   - appendfsync everysec: the gauge is 0 and exactly one level=warn
#     event=redis_not_durable line says what can be lost; the instance still serves;
#   - a reconnect that finds the same settings reads them again (CONFIG GET seen on
#     Redis) but does not warn again;
#   - CONFIG SET appendfsync always and the connections cut: the gauge turns 1 by
#     itself, without a restart of the instance;
#   - Redis restarted on the same port without AOF: the gauge turns 0 again and a
#     second warn line (appendonly=no) says so: one per turn to not durable;
#   - CONFIG renamed away (the settings cannot be read): the gauge is 0 and the warn
#     line says they could not be read.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin durable redis-server redis-cli curl

# start_seckill VAR NAME REDIS_PORT: an instance (a child of this shell, so that its
# exit code can be waited for); its base URL goes into VAR.
start_seckill() {
    start_instance --ready-secs 15 "$2" "$dir" --redis "127.0.0.1:$3" --threads 2 \
        --segments 2 || return 1
    printf -v "$1" '%s' "$STARTED_URL"
}
gauge() { curl -s --max-time 5 "$1/metrics" | awk '$1 == "seckill_redis_durable" { print $2 }'; }
gauge_is() { [[ $(gauge "$1") == "$2" ]]; }
warns() { grep -c 'level=warn event=redis_not_durable' "$dir/$1.log"; }
# CONFIG GET calls Redis has served: proof that the instance read the settings again.
config_gets() {
    redis-cli -p "$1" info commandstats | tr -d '\r' |
        awk -F'[=:,]' '$1 == "cmdstat_config|get" || $1 == "cmdstat_config" { n = $3 }
                       END { print n + 0 }'
}
more_config_gets() { (($(config_gets "$1") > $2)); }

start_redis redis-always "$dir" always && p_always=$STARTED_PORT &&
    start_redis redis-everysec "$dir" everysec && p_every=$STARTED_PORT &&
    start_redis redis-norename "$dir" always --rename-command CONFIG "" &&
    p_norename=$STARTED_PORT || { echo "redis did not start"; exit 1; }

start_seckill A seckill-always "$p_always" || { echo "instance did not start"; exit 1; }
start_seckill E seckill-everysec "$p_every" || { echo "instance did not start"; exit 1; }
start_seckill N seckill-norename "$p_norename" || { echo "instance did not start"; exit 1; }

# --- appendfsync always: durable, no warning
expect "appendfsync always: seckill_redis_durable 1" "1" "$(gauge "$A")"
expect "... no warn line" "0" "$(warns seckill-always)"
expect "... the gauge has HELP and TYPE" "2" \
    "$(curl -s "$A/metrics" | grep -c '^# \(HELP\|TYPE\) seckill_redis_durable ')"

# --- appendfsync everysec: not durable, one warning that says what can be lost
expect "appendfsync everysec: seckill_redis_durable 0" "0" "$(gauge "$E")"
expect "... exactly one warn line" "1" "$(warns seckill-everysec)"
expect "... which names the settings and what can be lost" "1" \
    "$(grep 'level=warn event=redis_not_durable' "$dir/seckill-everysec.log" |
        grep -c 'appendonly=yes appendfsync=everysec detail=".*can be lost')"
curl -s -o /dev/null -X PUT "$E/skus/dur" -d '{"stock":10,"segments":2}'
expect "... and the instance still serves orders" "201" "$(curl -s -o /dev/null \
    -w '%{http_code}' -X POST "$E/skus/dur/orders" -d '{"user_id":"ann"}')"

# A reconnect that finds the same settings: read again, no second warning.
before=$(config_gets "$p_every")
redis-cli -p "$p_every" client kill type normal >/dev/null
check "a reconnect makes the instance read the settings again" \
    wait_until 10 more_config_gets "$p_every" "$before"
expect "... still 0" "0" "$(gauge "$E")"
expect "... and still one warn line (one per turn, not per reading)" "1" \
    "$(warns seckill-everysec)"

# --- the settings become durable: the gauge follows after a reconnect
redis-cli -p "$p_every" config set appendfsync always >/dev/null
redis-cli -p "$p_every" client kill type normal >/dev/null
check "CONFIG SET appendfsync always + reconnect: the gauge turns 1" \
    wait_until 10 gauge_is "$E" 1
expect "... logged as durable" "1" \
    "$(grep -c 'level=info event=redis_durable .*appendonly=yes appendfsync=always' \
        "$dir/seckill-everysec.log")"
expect "... no new warn line" "1" "$(warns seckill-everysec)"

# --- Redis restarts without AOF on the same port: 0 again, and a second warning
proc_stop redis-everysec "$dir" 10
start_redis --port "$p_every" redis-everysec "$dir" no || { echo "redis did not restart"; exit 1; }
check "Redis restarted without AOF: the gauge turns 0" wait_until 10 gauge_is "$E" 0
expect "... a second warn line, saying appendonly=no" "2 1" \
    "$(warns seckill-everysec) $(grep 'level=warn event=redis_not_durable' \
        "$dir/seckill-everysec.log" | tail -1 | grep -c 'appendonly=no')"
expect "... the instance is the one started at the beginning" "0" \
    "$(proc_alive seckill-everysec "$dir"; echo $?)"

# --- CONFIG renamed away: unknown counts as not durable, and the warning says why
expect "CONFIG refused: seckill_redis_durable 0" "0" "$(gauge "$N")"
expect "... one warn line saying the settings could not be read" "1" \
    "$(grep 'level=warn event=redis_not_durable' "$dir/seckill-norename.log" |
        grep -c 'appendonly=unknown .*could not be read')"

it_expect_clean_exit seckill-always seckill-everysec seckill-norename
checks_summary
