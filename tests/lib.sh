# shellcheck shell=bash
# shellcheck disable=SC2034 # QUIET, SECKILL_BIN_PATH: for cluster.sh; dir, seeds: for the tests
# lib.sh — what every integration script starts with (source it first):
# scripts/lib.sh (ports, processes, waits), tests/checks.sh (expect, check, ...) and
# the launcher, scripts/cluster.sh, sourced: its start_redis, start_instance,
# start_faultproxy, ... start a test's own pieces as children of the test's shell (their
# exit codes can be waited for), the same way `cluster.sh up` starts a cluster's.
#
#   it_begin NAME [TOOL...]   $dir: a fresh temp dir (seckill-it-NAME.XXXXXX); the
#                             server binary and every TOOL must be there (checks_require);
#                             on exit, INT or TERM: it_cleanup
#   it_cleanup                the test's on_exit (a function, when it defines one; its
#                             failure fails the test), then every process recorded in
#                             $dir and in the dirs under it stopped (cluster.sh down),
#                             then checks_dispose: the dir goes, or stays when anything
#                             failed
#   it_sanitizer              the server's sanitizer runtime (libasan/libtsan path), or
#                             nothing for a plain build
#   it_cluster_up ARGS...     scripts/cluster.sh up --dir $dir/c --quiet ARGS (output in
#                             $dir/up.out, its end shown when it fails); sources the
#                             cluster's cluster.env; seeds: the Redis Cluster's masters
#   it_order_loop URL C       orders POSTed to URL (.../skus/SKU/orders) by fresh users
#                             uC-N, each with its own key kC-N, until $dir/stop appears; a
#                             line per request: start_us end_us status key user order_id error
#   it_order URL SKU USER QTY [KEY]  one order (KEY: its Idempotency-Key); prints
#                             "code order_id error seconds" ("-" for a missing field)
#   it_master_replica         a data Redis "master" (no AOF) and its "replica" in $dir,
#                             each seeing the other; mport, rport: their ports
#   it_replica_synced         the replica's link to its master is up
#   it_expect_clean_exit NAME...  SIGTERM to each process NAME of $dir (a child of this
#                             shell), then expects its exit code 0 ("NAME: exit code
#                             after SIGTERM")
#
# ROOT is the checkout; SECKILL_BIN_PATH the server that start_instance runs.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=tests/checks.sh
source "$ROOT/tests/checks.sh"
# The launcher's functions; sourcing it sets -e, which the tests do not run with.
_it_opts=$(set +o)
# shellcheck source=/dev/null # linted by itself; its locals are no concern of the tests
source "$ROOT/scripts/cluster.sh"
eval "$_it_opts"
QUIET=1
dir=""    # the test's temp dir (it_begin)
seeds=()  # a Redis Cluster's masters, host:port (it_cluster_up)

it_begin() {
    local name=$1
    shift
    dir=$(mktemp -d "${TMPDIR:-/tmp}/seckill-it-$name.XXXXXX")
    trap it_cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    checks_require "$@"
    SECKILL_BIN_PATH=$(seckill_bin)
}

# it_sanitizer: the path of the sanitizer runtime (libasan, libtsan) the server is
# built with, or nothing (a plain build). Tests shorten what CI repeats under one,
# and preload it first where they preload something into the server.
it_sanitizer() {
    ldd "$SECKILL_BIN_PATH" 2>/dev/null | grep -oE '/[^ ]*lib[at]san\.so[^ ]*' | head -1
}

# it_plain_only SUBJECT: exits 77 (skipped) under a sanitizer build, for a test whose
# subject is a harness or a tool, not the server: its instances run what other tests
# run, and CI repeats every test under two sanitizers.
it_plain_only() {
    local san
    san=$(it_sanitizer)
    [[ -z $san ]] && return 0
    echo "$1 is this test's subject, not the server: skipped under ${san##*/}"
    trap - EXIT
    rm -rf "$dir"
    exit 77
}

it_cleanup() {
    local rc=$? d
    if declare -F on_exit >/dev/null; then on_exit || rc=1; fi
    # the test's own processes first: they may use a cluster's
    for d in "$dir" "$dir"/*/; do
        compgen -G "${d%/}/*.pid" >/dev/null && { cmd_down "${d%/}" 0 || rc=1; }
    done
    checks_dispose "$dir" "$rc"
    exit "$rc"
}

it_expect_clean_exit() {
    local name pid code
    for name in "$@"; do
        pid=$(cat "$dir/$name.pid")
        kill -TERM "$pid"
        wait "$pid"
        code=$?
        expect "$name: exit code after SIGTERM" "0" "$code"
        rm -f "$dir/$name.pid"
    done
}

# it_seg_route USER: the routing number seckill gives a user (inventory/segment.c:
# FNV-1a 64, high half folded in, 31 bits); its home segment is it modulo the count
it_seg_route() {
    local u=$1 h=-3750763034362895579 i c
    for ((i = 0; i < ${#u}; i++)); do
        printf -v c '%d' "'${u:i:1}"
        h=$(((h ^ c) * 1099511628211))
    done
    echo $(((h ^ ((h >> 32) & 0xffffffff)) & 0x7fffffff))
}

# Order records, many to a hash (inventory/lua/rec.lua): a test reads and changes
# one with the service's own pieces, never with a layout of its own.
# it_rec_key ID [PREFIX]: the key of the hash of ID's record ("order:" by default; on
# a cluster "o:{<gene tag>}:")
it_rec_key() {
    local id=$1 prefix=${2:-order:}
    ((${#id} > 9)) && echo "$prefix${id:0:${#id}-9}" || echo "${prefix}0"
}
# it_rec_lua: rec.lua's functions, for a test's own EVAL to call (rec_key, rec_get,
# rec_text...), then the test's Lua
it_rec_lua() { cat "$ROOT/inventory/lua/rec.lua"; }
# it_rec PORT ID FIELD: a field of ID's record on the Redis at PORT ('' when absent)
it_rec() {
    redis-cli -p "$1" EVAL "$(it_rec_lua)
local r = rec_get(KEYS[1], ARGV[1]) or {}
return r[ARGV[2]] or ''" 1 "$(it_rec_key "$2")" "$2" "$3"
}
# it_rec_set PORT ID FIELD VALUE: sets a field of ID's record ('' removes it); 1, or 0
# when there is no such record
it_rec_set() {
    redis-cli -p "$1" EVAL "$(it_rec_lua)
local r = rec_get(KEYS[1], ARGV[1])
if not r then return 0 end
r[ARGV[2]] = ARGV[3] ~= '' and ARGV[3] or nil
redis.call('HSET', KEYS[1], ARGV[1], rec_text(r))
return 1" 1 "$(it_rec_key "$2")" "$2" "$3" "$4"
}
# it_due_now PORT SKU ID...: the reservations ID... of SKU (one Redis) due at once, in
# one step: each record's pay_by and its entry in the SKU's due set 1 (ms), and the SKU
# in the deadline index at 1, which the sweep reads first
it_due_now() {
    local port=$1 sku=$2
    shift 2
    redis-cli -p "$port" EVAL "$(it_rec_lua)
for i = 2, #ARGV do
  local key = rec_key('order:', ARGV[i])
  local r = rec_get(key, ARGV[i])
  r.pay_by = '1'
  redis.call('HSET', key, ARGV[i], rec_text(r))
  redis.call('ZADD', KEYS[1], 1, ARGV[i])
end
redis.call('ZADD', KEYS[2], 1, ARGV[1])" 2 "sk:{$sku}:due" seckill:due "$sku" "$@"
}
# it_rec_exists PORT ID: 1 when ID's record is in Redis, else 0
it_rec_exists() { redis-cli -p "$1" HEXISTS "$(it_rec_key "$2")" "$2"; }

# it_key_digests PORT PATTERN...: each key matching a pattern on the Redis at PORT
# (the segments' lock keys aside: an order takes its locks), sorted, with a digest of
# its DUMP: two equal listings mean not a byte of those keys changed
it_key_digests() {
    local port=$1 p k
    shift
    for p in "$@"; do redis-cli -p "$port" --scan --pattern "$p"; done | grep -v ':lock:' |
        sort | while read -r k; do
            printf '%s %s\n' "$k" "$(redis-cli -p "$port" --no-raw DUMP "$k" | sha1sum | cut -c1-16)"
        done
}

it_order() {
    local hdr=()
    [[ -n ${5:-} ]] && hdr=(-H "Idempotency-Key: $5")
    curl -s --max-time 10 -w '\n%{http_code} %{time_total}' "${hdr[@]}" -X POST \
        "$1/skus/$2/orders" -d "{\"user_id\":\"$3\",\"qty\":$4}" |
        { read -r body; read -r code secs
          echo "$code $(jq -r '.order_id // "-"' <<<"$body") $(jq -r '.error // "-"' <<<"$body") $secs"; }
}

# it_deploy_nginx P1 P2 P3: deploy/nginx/seckill.conf as it stands in $dir/nginx/, its
# site values replaced (the upstreams 127.0.0.1:P1..P3, the public and admin listeners on
# free loopback ports, set in pub and adm, the certificate from $dir/tls/), included by a
# throwaway nginx.conf; start it with nginx -p "$dir/nginx" -c "$dir/nginx/nginx.conf".
it_deploy_nginx() {
    pub=$(free_port) && adm=$(free_port) || return 1
    mkdir -p "$dir/nginx/tmp"
    sed -e "s|^\(    server \)127.0.0.1:8081|\1127.0.0.1:$1|" \
        -e "s|^\(    server \)127.0.0.1:8082|\1127.0.0.1:$2|" \
        -e "s|^\(    server \)127.0.0.1:8083|\1127.0.0.1:$3|" \
        -e "s|listen 443 ssl;|listen 127.0.0.1:$pub ssl;|" \
        -e "s|listen 127.0.0.1:9443 ssl;|listen 127.0.0.1:$adm ssl;|" \
        -e "s|/etc/seckill/tls/|$dir/tls/|" "$ROOT/deploy/nginx/seckill.conf" \
        >"$dir/nginx/seckill.conf"
    cat >"$dir/nginx/nginx.conf" <<EOF
# the host's nginx.conf, reduced to what a throwaway one needs
daemon off;
worker_processes 2;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $dir/nginx/tmp/body;
    proxy_temp_path $dir/nginx/tmp/proxy;
    fastcgi_temp_path $dir/nginx/tmp/fastcgi;
    uwsgi_temp_path $dir/nginx/tmp/uwsgi;
    scgi_temp_path $dir/nginx/tmp/scgi;
    include $dir/nginx/seckill.conf;
}
EOF
}

it_replica_synced() {
    redis-cli -p "$rport" info replication | tr -d '\r' | grep -q '^master_link_status:up'
}

it_master_replica() {
    start_redis master "$dir" no || { echo "master did not start"; return 1; }
    mport=$STARTED_PORT
    start_redis replica "$dir" no --replicaof 127.0.0.1 "$mport" || return 1
    rport=$STARTED_PORT
    wait_until 20 it_replica_synced || { echo "the replica did not sync"; return 1; }
    attached() { redis-cli -p "$mport" info replication | tr -d '\r' | grep -q '^connected_slaves:1'; }
    wait_until 20 attached || { echo "the master does not see its replica"; return 1; }
}

# (A request forks one curl and nothing else: the id and the error are read by a match
# on the server's compact JSON, as the loops run flat out beside the other tests.)
it_order_loop() {
    local url=$1 c=$2 n=0 t0 t1 out status body id err
    while [[ ! -e $dir/stop ]]; do
        n=$((n + 1))
        t0=${EPOCHREALTIME/./}
        out=$(curl -s --max-time 10 -w '\n%{http_code}' -X POST "$url" \
            -H "Idempotency-Key: k$c-$n" -d "{\"user_id\":\"u$c-$n\"}")
        t1=${EPOCHREALTIME/./}
        status=${out##*$'\n'}
        body=${out%$'\n'*}
        id=- err=-
        [[ $body =~ \"order_id\":\"([0-9]+)\" ]] && id=${BASH_REMATCH[1]}
        [[ $body =~ \"error\":\"([a-z_]+)\" ]] && err=${BASH_REMATCH[1]}
        echo "$t0 $t1 $status k$c-$n u$c-$n $id $err"
    done
}

it_cluster_up() {
    "$ROOT/scripts/cluster.sh" up --dir "$dir/c" --quiet "$@" >"$dir/up.out" 2>&1 || {
        tail -20 "$dir/up.out"
        return 1
    }
    # shellcheck source=/dev/null
    source "$dir/c/cluster.env"
    IFS=, read -r -a seeds <<<"$REDIS_CLUSTER_SEEDS"
}
