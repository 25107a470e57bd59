# shellcheck shell=bash
# lib.sh — the set-up the load tests share (source it; it brings scripts/lib.sh):
# bench.sh, segments.sh, shards.sh and run.sh. Each runs its steps on fresh clusters of
# scripts/cluster.sh, one at a time ($CUR_CLUSTER), into an output dir ($out), wrk
# placing orders with $LUA.
#
#   lt_require TOOL...          dies unless every TOOL and the server binary are here
#   lt_out NAME LINK SUBDIR...  $out: the --out dir when one was given, else
#                               results/NAME/, results/LINK linking to it; SUBDIRs made
#                               in it; $out made absolute
#   lt_traps KEEP               on exit (or INT, TERM): the caller's lt_on_exit when it
#                               has one (its own processes stopped), the running cluster
#                               down (its failure fails the run), then $out/clusters removed unless
#                               KEEP says: never (removed), failed (kept when the run failed
#                               or set any_error), always
#   progress MESSAGE            "[STEP/TOTAL m:ss] MESSAGE" on stderr (STEP and TOTAL
#                               are the caller's; $started, the time, is set by lt_traps)
#   lt_cluster_up DIR ERR ARGS...   scripts/cluster.sh up --dir DIR --quiet ARGS, its
#                               stderr in ERR; sources DIR/cluster.env. When it does not
#                               start: UP_ERROR says why (its last word), nothing of it
#                               runs, status 1
#   lt_cluster_down             the running cluster down; 1 when that failed
#   put_sku SKU STOCK SEGMENTS [EXTRA]  creates or resets (?reset=true; a 409, events
#                               still on their way to PostgreSQL, asked again for
#                               20 s at most) SKU through $LB_URL (limit 1,
#                               EXTRA more JSON fields: ,"pay_within_ms":1500;
#                               $SECKILL_ADMIN_TOKEN when set); 1 when refused

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib.sh"
CLUSTER=$SECKILL_ROOT/scripts/cluster.sh
# shellcheck disable=SC2034 # for the scripts that source this
LUA=$SECKILL_ROOT/loadtest/orders.lua
CUR_CLUSTER=""
any_error=0
STEP=0 TOTAL=0

lt_require() {
    local p
    for p in "$@"; do command -v "$p" >/dev/null || die "$p not found (scripts/deps.sh installs it)"; done
    seckill_bin >/dev/null || exit 1
}

lt_out() {
    local name=$1 link=$2 sub
    shift 2
    if [[ -z $out ]]; then
        out=$SECKILL_ROOT/results/$name
        mkdir -p "$out"
        ln -sfn "$(basename "$out")" "$SECKILL_ROOT/results/$link"
    fi
    for sub in "$@"; do mkdir -p "$out/$sub"; done
    out=$(cd "$out" && pwd)
}

_LT_KEEP=never
lt_cleanup() {
    local rc=$?
    if declare -F lt_on_exit >/dev/null; then lt_on_exit; fi
    lt_cluster_down || rc=1
    case $_LT_KEEP in
    never) rm -rf "$out/clusters" ;;
    failed) ((rc != 0 || any_error)) || rm -rf "$out/clusters" ;;
    esac
    exit "$rc"
}
lt_traps() {
    _LT_KEEP=$1
    started=$SECONDS
    trap lt_cleanup EXIT
    trap 'log "interrupted"; exit 130' INT
    trap 'exit 143' TERM
}

progress() {
    local t=$((SECONDS - started))
    printf '[%2d/%d %d:%02d] %s\n' "$STEP" "$TOTAL" $((t / 60)) $((t % 60)) "$*" >&2
}

lt_cluster_up() {
    local dir=$1 err=$2
    shift 2
    CUR_CLUSTER=$dir
    if ! "$CLUSTER" up --dir "$dir" --quiet "$@" >/dev/null 2>"$err"; then
        # shellcheck disable=SC2034 # for the caller
        UP_ERROR=$(grep -v '^ ' "$err" | grep -iv 'stopping what' | tail -n 1)
        lt_cluster_down || true
        return 1
    fi
    # shellcheck disable=SC1091
    source "$dir/cluster.env"
}

lt_cluster_down() {
    local dir=$CUR_CLUSTER
    CUR_CLUSTER=""
    [[ -n $dir && -d $dir ]] || return 0
    "$CLUSTER" down --dir "$dir" --quiet >/dev/null
}

put_sku() { # SKU STOCK SEGMENTS [EXTRA: more fields, ',"pay_within_ms":1500']
    local -a auth=()
    local code deadline=$((SECONDS + 20))
    [[ -n ${SECKILL_ADMIN_TOKEN:-} ]] && auth=(-H "Authorization: Bearer $SECKILL_ADMIN_TOKEN")
    while :; do
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -X PUT \
            -H 'Content-Type: application/json' "${auth[@]}" \
            -d "{\"stock\":$2,\"segments\":$3,\"per_user_limit\":1${4:-}}" \
            "$LB_URL/skus/$1?reset=true")
        [[ $code == 200 || $code == 201 ]] && return 0
        # 409 not_settled: with --postgres, the last round's events are still on their
        # way (the sink carries them within a second or two); 20 s is ample on a
        # busy box
        [[ $code == 409 ]] && ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}
