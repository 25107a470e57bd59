#!/usr/bin/env bash
# room.sh — the waiting room's demo (issue 48, point 6): a burst of buyers, part before
# the sale's starts_at and part after, for a few units, through nginx in front of three
# instances; what the room did, measured from the buyers' side and from Redis.
#
#   loadtest/room.sh [options] [-- extra seckill flags]
#
#   --buyers N        buyers, one process of loadtest/roomclient.c on one event loop (20000)
#   --stock N         units of the SKU, per-user limit 1 (300)
#   --rate R          the room's rate_per_s (30)
#   --max-active A    the room's max_active (R): with A = R a second of buyers slow to
#                     order holds the admissions back (live passes at max_active)
#   --spread-ms S     the buyers arrive evenly over S ms (4000)
#   --before F        the share of that spread before starts_at, 0..1 (0.5)
#   --instances N     instances behind nginx (3)
#   --conns C         the client's kept-alive connections to nginx (64)
#   --lock MODE       the instances' lock mode (atomic)
#   --out DIR         where buyers.tsv, news.json, report.json go
#                     (results/room-<time>/, results/room-latest links to it)
#   --check KNOW_MS   exit 1 unless: nothing oversold, every unit sold, every buyer
#                     finished, the rate never exceeded (any window of the pacer's news,
#                     on Redis's clock: at most R x its length + R, one second's burst,
#                     + 1 for rounding), and every buyer waiting at the last sale told
#                     sold_out within KNOW_MS of it (tests/it_room_load.sh)
#   --kill-pacer MS   MS after starts_at, kill (SIGKILL) the instance that holds the
#                     pacer's lease (the one whose /metrics says seckill_room_pacer 1);
#                     the report then says when, and the admissions per 10 s window
#                     (use a stock that lasts over 20 s at the rate: --stock 1200)
#   --keep            keep the cluster's dir (logs) under DIR/clusters/
#
# The report (loadtest/room_report.py): Redis commands per buyer (INFO commandstats
# over the sale, less what the instances' own duties sent in a quiet window of the
# same room before it, scaled to the sale's length), admitted per second against the
# rate (the pacer's news stream: each tick's admissions at Redis's time), fairness (the
# pre-queue's Spearman rho between arrival and place; after the start, pairs of places
# out of arrival order by more than 100 ms; whether the admitted are the first places),
# the time from the last unit sold to each waiting buyer's sold_out, oversell, the
# polls a second (the client's count) and the CPU the instances and nginx used over the
# sale (/proc: what the buyers' polls cost them).
# Exit 0 when the sale ran (and, with --check, held); 1 otherwise; 2 on a usage error.
# shellcheck disable=SC2317 # functions run from traps
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

buyers=20000 stock=300 rate=30 spread=4000 before=0.5 instances=3 conns=64 lock=atomic
out="" check="" keep=0 kill_pacer="" max_active="" extra=()
need() { [[ $# -ge 2 ]] || die "$1 needs a value"; }
while (($#)); do
    case $1 in
    --buyers) need "$@"; buyers=$2; shift 2 ;;
    --stock) need "$@"; stock=$2; shift 2 ;;
    --rate) need "$@"; rate=$2; shift 2 ;;
    --max-active) need "$@"; max_active=$2; shift 2 ;;
    --spread-ms) need "$@"; spread=$2; shift 2 ;;
    --before) need "$@"; before=$2; shift 2 ;;
    --instances) need "$@"; instances=$2; shift 2 ;;
    --conns) need "$@"; conns=$2; shift 2 ;;
    --lock) need "$@"; lock=$2; shift 2 ;;
    --out) need "$@"; out=$2; shift 2 ;;
    --check) need "$@"; check=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --kill-pacer) need "$@"; kill_pacer=$2; shift 2 ;;
    -h | --help) usage_from_header "${BASH_SOURCE[0]}" 0 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (loadtest/room.sh --help)" ;;
    esac
done
max_active=${max_active:-$rate}
for v in buyers stock rate max_active instances conns; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "--${v//_/-} must be a whole number > 0 (got '${!v}')"
done
[[ $spread =~ ^[0-9]+$ ]] || die "--spread-ms must be a whole number of ms (got '$spread')"
[[ $before =~ ^(0(\.[0-9]+)?|1(\.0+)?)$ ]] || die "--before must be in 0..1 (got '$before')"
[[ -z $check || $check =~ ^[1-9][0-9]*$ ]] || die "--check must be a whole number of ms (got '$check')"
[[ -z $kill_pacer || $kill_pacer =~ ^[0-9]+$ ]] || die "--kill-pacer must be a whole number of ms (got '$kill_pacer')"
client=${SECKILL_BUILD:-$ROOT/build}/loadtest/roomclient
[[ $client == /* ]] || client=$ROOT/$client
[[ -x $client ]] || die "$client not built (make build/loadtest/roomclient)"
lt_require curl jq redis-cli python3

lt_out "room-$(date +%Y%m%d-%H%M%S)-$$" room-latest clusters
if ((keep)); then lt_traps always; else lt_traps failed; fi

rcli() { redis-cli -p "$REDIS_PORT" "$@"; }
mon_pid=""
kill_pid=""
lt_on_exit() {
    [[ -z $mon_pid ]] || kill "$mon_pid" 2>/dev/null || true
    [[ -z $kill_pid ]] || kill "$kill_pid" 2>/dev/null || true
}
redis_ms() { rcli TIME | { read -r s; read -r us; echo $((s * 1000 + us / 1000)); }; }
# stats FILE: INFO commandstats, as "command calls" lines
stats() { rcli INFO commandstats | sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*/\1 \2/p' >"$1"; }
# cpu_s PIDS...: their CPU time (user + system), seconds, children not counted
cpu_s() {
    local pid sum=0 f
    local -a v
    for pid in "$@"; do
        f=$(cut -d')' -f2- "/proc/$pid/stat" 2>/dev/null) || continue
        read -ra v <<<"$f" # fields 14, 15 of stat (utime, stime): 12, 13 after the name
        sum=$((sum + v[11] + v[12]))
    done
    python3 -c "print(round($sum / $(getconf CLK_TCK), 2))"
}
inst_pids() { cat "$out/clusters/room"/seckill-*.pid; }
lb_pids() { local m; m=$(cat "$out/clusters/room/nginx/nginx.pid" 2>/dev/null) || return 0; echo "$m"; pgrep -P "$m"; }
rfc() { printf '%s.%03dZ' "$(date -u -d "@$(($1 / 1000))" +%Y-%m-%dT%H:%M:%S)" $(($1 % 1000)); }

STEP=1 TOTAL=4
progress "cluster: $instances instances ($lock) behind nginx, one Redis"
lt_cluster_up "$out/clusters/room" "$out/up.err" --instances "$instances" --lb nginx \
    --lock "$lock" -- --segments 16 --log-level warn "${extra[@]}" ||
    die "the cluster did not start: $UP_ERROR"

# Every command Redis runs, to tell those sent (a round trip each) from those a script
# ran inside (INFO commandstats counts both): MONITOR, from here to the end of the sale.
redis-cli -p "$REDIS_PORT" MONITOR >"$out/monitor.txt" &
mon_pid=$!

# The sale starts once the quiet window (below) is over and the buyers' first share
# has arrived: their client starts QUIET_MS + 1 s from now.
quiet_ms=3000
sku=room-demo
now=$(redis_ms)
client_at=$((now + quiet_ms + 1000))
before_ms=$(python3 -c "print(round($spread * $before))")
starts=$((client_at + 100 + before_ms)) # the client's first buyer arrives 100 ms in
put_sku "$sku" "$stock" 16 ",\"starts_at\":\"$(rfc "$starts")\",\"room\":{\"rate_per_s\":$rate,\"max_active\":$max_active,\"pass_ttl_ms\":30000}" ||
    die "PUT /skus/$sku refused"

STEP=2
progress "quiet: ${quiet_ms} ms of the room before its sale, what the instances send by themselves"
# Wait until the room is known (its news stream written by the pacer), then measure a
# window of exactly quiet_ms on Redis's clock: its commands are the background.
has_news() { (($(rcli XLEN "sk:{$sku}:room:news") > 0)); }
wait_until 10 has_news || die "the pacer never wrote the room's news in 10 s"
stats "$out/quiet0.txt"
q0=$(redis_ms)
sleep "$(python3 -c "print($quiet_ms / 1000)")" # the window itself, not a wait on a condition
stats "$out/quiet1.txt"
q1=$(redis_ms)

STEP=3
progress "sale: $buyers buyers over $spread ms, starts_at $((before_ms)) ms in, $stock units at $rate a second"
wait_ms=$((client_at - $(redis_ms)))
((wait_ms <= 0)) || sleep "$(python3 -c "print($wait_ms / 1000)")" # until the scheduled start
stats "$out/sale0.txt"
s0=$(redis_ms)
# shellcheck disable=SC2046 # the pids, one word each
cpu0_inst=$(cpu_s $(inst_pids)) cpu0_lb=$(cpu_s $(lb_pids))
rc=0
if [[ -n $kill_pacer ]]; then
    (
        at=$((starts + kill_pacer))
        while (($(redis_ms) < at)); do sleep 0.02; done
        i=0
        for url in $INSTANCE_URLS; do
            i=$((i + 1))
            if curl -s --max-time 2 "$url/metrics" | grep -q '^seckill_room_pacer 1$'; then
                "$CLUSTER" stop --dir "$out/clusters/room" "seckill-$i" --kill >/dev/null 2>&1
                echo "$i $(redis_ms)" >"$out/killed.txt"
                break
            fi
        done
    ) &
    kill_pid=$!
fi
"$client" 127.0.0.1 "$LB_PORT" "$sku" "$buyers" "$spread" "$conns" "$out/buyers.tsv" \
    2>"$out/client.err" || rc=$?
stats "$out/sale1.txt"
s1=$(redis_ms)
# shellcheck disable=SC2046 # the pids, one word each
cpu1_inst=$(cpu_s $(inst_pids)) cpu1_lb=$(cpu_s $(lb_pids))
if [[ -n $kill_pid ]]; then # done, or not due in a sale that ended first
    kill "$kill_pid" 2>/dev/null || true
    wait "$kill_pid" 2>/dev/null || true
    kill_pid=""
fi
kill "$mon_pid" 2>/dev/null || true
wait "$mon_pid" 2>/dev/null || true
mon_pid=""
cat "$out/client.err" >&2
((rc == 0)) || log "the client ended with $rc (buyers unfinished)"

STEP=4
progress "report"
rcli --json XRANGE "sk:{$sku}:room:news" - + >"$out/news.json"
curl -s "$LB_URL/skus/$sku" >"$out/sku.json"
curl -s "$LB_URL/skus/$sku/audit" >"$out/audit.json"
report=(--buyers "$out/buyers.tsv" --news "$out/news.json"
    --sku "$out/sku.json" --audit "$out/audit.json" --stats "$out"
    --monitor "$out/monitor.txt" --windows "$q0,$q1,$s0,$s1" --starts "$starts" --rate "$rate"
    --stock "$stock" --instances "$instances" --spread-ms "$spread" --out "$out/report.json")
[[ -z $check ]] || report+=(--check "$check")
report+=(--polls "$out/buyers.tsv.polls")
# the CPU of those that ran the whole sale (not with an instance killed in it)
[[ -n $kill_pacer ]] || report+=(--cpu "$cpu0_inst,$cpu1_inst,$cpu0_lb,$cpu1_lb")
[[ ! -s $out/killed.txt ]] || report+=(--killed "$(cat "$out/killed.txt")")
printf '%q ' python3 "$ROOT/loadtest/room_report.py" "${report[@]}" >"$out/report.sh" # again by hand
python3 "$ROOT/loadtest/room_report.py" "${report[@]}" || rc=1
exit "$rc"
