#!/usr/bin/env bash
# The README's "API in five minutes" runs as written (issue 51): its first block's
# server flags start an instance (on free ports: localhost:8080 and Redis's 6379 are
# the only things changed), then every command of its second block runs in turn against
# it, the order id of the 201 put where the README shows one. Each answers what its
# comment says: the PUT 201, the order 201, the reads 200 (the audit consistent), the
# PUT with ?reset=true 200, the operator's reads 200. A README whose commands drift
# from the server fails here. About 5 s.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin readme redis-server redis-cli curl jq

# The section's ```sh blocks, each command on one line (continuations joined).
awk '/^## The API in five minutes/ { on = 1; next } on && /^## / { exit }
     on && /^```sh/ { block++; code = 1; next } on && /^```/ { code = 0; next }
     on && code && !/^#/ && NF {
         line = line $0
         if (sub(/\\$/, "", line)) next
         print block "\t" line; line = "" }' "$ROOT/README.md" >"$dir/tour"
expect "the tour has its two blocks" "1 2" "$(cut -f1 "$dir/tour" | uniq | paste -sd' ')"

# --- block 1: the server's flags, as the README gives them
server=$(awk -F'\t' '$1 == 1 && /build\/seckill/ { sub(/.*build\/seckill /, "", $2); print $2 }' "$dir/tour")
check "block 1 starts build/seckill ($server)" test -n "$server"
start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
read -r -a flags <<<"$server"
for i in "${!flags[@]}"; do # Redis's port is the one this test started
    [[ ${flags[$i]} == 127.0.0.1:6379 ]] && flags[i]=127.0.0.1:$rport
done
# (--listen is the launcher's: a free port)
args=()
for ((i = 0; i < ${#flags[@]}; i++)); do
    if [[ ${flags[$i]} == --listen ]]; then i=$((i + 1)); else args+=("${flags[$i]}"); fi
done
start_instance tour "$dir" "${args[@]}" || exit 1
U=$STARTED_URL

# --- block 2: every command in turn
n=0 order=""
while IFS=$'\t' read -r block cmd; do
    [[ $block == 2 ]] || continue
    n=$((n + 1))
    cmd=${cmd//localhost:8080/${U#http://}}
    [[ -n $order ]] && cmd=${cmd//382742028233994240/$order}
    # the command as written, its status and body kept
    code=$(eval "$cmd -s -o '$dir/body' -w '%{http_code}'")
    case $cmd in
    *"-X PUT"*reset=true*) want=200 ;;
    *"-X PUT"*) want=201 ;;
    *"-X POST"*orders*) want=201 ;;
    *) want=200 ;;
    esac
    expect "$n: $cmd" "$want" "$code"
    case $cmd in
    *"-X POST"*orders*) order=$(jq -r .order_id "$dir/body") ;;
    */audit) expect "... consistent" true "$(jq -r .consistent "$dir/body")" ;;
    *"/orders/"*) expect "... the order placed" "alice 1" "$(jq -r '"\(.user_id) \(.qty)"' "$dir/body")" ;;
    esac
done <"$dir/tour"
check "block 2 ran 11 commands ($n)" test "$n" -eq 11

checks_finish
