#!/usr/bin/env bash
# Integration: loadtest/jepsen/net.sh, the network of namespaces the fault tests run on.
# Three nodes a b c on the bridge, a redis-server in a and in b (both on port 6379: each
# namespace has its own ports; protected mode off, the network is the test's own),
# redis-cli PING from the nodes:
#   - all reach all;
#   - net_cut a b: a cannot reach b's Redis nor b a's, c reaches both; a connection
#     open across the cut stays open, its PING is dropped and retransmitted by TCP, and
#     the answer arrives after net_heal, with no process restarted;
#   - net_cut_oneway a b: TCP fails both ways (a connect needs a SYN one way and a
#     SYN-ACK back), so the asymmetry is shown with UDP datagrams, counted at the door
#     of the receiver (an nft counter before the cut's drop) and behind it (one after):
#     a's reach b's door and are dropped there (b's net_dropped grows), b's pass into a;
#   - net_isolate, net_partition, cuts are idempotent and net_heal_pair heals a double
#     cut, net_heal restores all (the same probes, a few ms each);
#   - net_link_down a: c cannot reach a, a cannot reach b; b and c unaffected;
#     net_link_up a: a is back;
#   - net_down: no namespace of the run, no new link on the host, both Redis' pids gone;
#     a second net_down is a no-op.
# A failure anywhere stops the test and the EXIT trap takes the network down all the
# same. Exits 77 when namespaces cannot be made here (not root, no nft), and in a
# sanitizer build's run (SECKILL_BUILD build/address, build/thread): it starts no
# seckill, so the plain build's run has said all it can.
#
# Why namespaces and not the loopback proxy (tests/faultproxy.c): across a real
# partition both ends' sockets stay open, the kernel drops the packets, TCP retransmits
# with its backoff, keepalives and timeouts run their course, and what was sent arrives
# after the heal, on the same connection. The proxy can only imitate that: it holds
# bytes in user space, the client's own kernel always has a live peer (the proxy) that
# acknowledges everything, and a one-way cut or a fault between two servers that do not
# talk through it cannot be had at all.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=tests/checks.sh
source "$ROOT/tests/checks.sh"
# shellcheck source=loadtest/jepsen/net.sh
source "$ROOT/loadtest/jepsen/net.sh"

if [[ ${SECKILL_BUILD:-build} != build ]]; then
    echo "no seckill in this test, nothing for $SECKILL_BUILD's sanitizer to see: skipped"
    exit 77
fi
if ! why=$(net_check); then
    echo "$why: skipped"
    exit 77
fi
for tool in redis-server redis-cli timeout; do
    command -v "$tool" >/dev/null || {
        echo "$tool not installed (scripts/deps.sh installs it): skipped"
        exit 77
    }
done

dir=$(mktemp -d "${TMPDIR:-/tmp}/seckill-it-netns.XXXXXX")
finish() {
    local rc=$?
    net_down "$dir" || rc=1
    if ((rc != 0 && failed == 0)); then
        echo "FAIL - the test stopped early (status $rc)"
        failed=1
    fi
    if ! checks_summary && ((rc == 0)); then rc=1; fi
    checks_dispose "$dir" "$rc"
    exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

host_links() { ip -o link show | awk -F': ' '{ print $2 }' | sort; }
links_before=$(host_links)

net_up "$dir" a b c
B=$(net_addr b)
run=$(net_ns a)
run=${run%-a}
check "net_up made a hub and three node namespaces" \
    eq "4" "$(ip netns list | awk -v r="$run" '$1 == r || index($1, r "-") == 1' | wc -l)"
expect "net_up added no link to the host" "$links_before" "$(host_links)"

P=6379
for n in a b; do
    net_start "$n" "redis-$n" "$dir" redis-server --bind "$(net_addr "$n")" --port $P \
        --protected-mode no --save '' --appendonly no --daemonize no --dir "$dir"
done

# pong FROM TO: FROM's redis-cli gets PONG from TO's Redis within 2 s.
pong() {
    [[ $(net_exec "$1" timeout 2 redis-cli -h "$(net_addr "$2")" -p $P PING 2>/dev/null) == PONG ]]
}
no_pong() { ! pong "$@"; }
wait_started redis-a "$dir" 10 pong a a
wait_started redis-b "$dir" 10 pong b b

# UDP probes: in every node a counter at the door (before the cut's drop) and one behind
# it (after), both for datagrams to port 9999. Nobody listens there: the count is all.
for n in a b c; do
    net_exec "$n" nft -f - <<'EOF'
table inet probe {
    chain door {
        type filter hook input priority filter - 10; policy accept;
        udp dport 9999 counter
    }
    chain behind {
        type filter hook input priority filter + 10; policy accept;
        udp dport 9999 counter
    }
}
EOF
done
probe_count() { # NODE CHAIN
    net_exec "$1" nft list chain inet probe "$2" | sed -n 's/.*counter packets \([0-9]*\) .*/\1/p'
}
door_grew() { (($(probe_count "$1" door) > $2)); }
# udp FROM TO: one datagram from FROM to TO; "arrived" (it passed TO's input), "dropped"
# (it reached TO and a cut dropped it) or "lost" (it never reached TO's input in 3 s).
udp() {
    local door behind
    door=$(probe_count "$2" door)
    behind=$(probe_count "$2" behind)
    # shellcheck disable=SC2016 # expanded by the inner shell
    net_exec "$1" bash -c 'echo probe >"/dev/udp/$0/9999"' "$(net_addr "$2")"
    if ! wait_until 3 door_grew "$2" "$door"; then
        echo lost
    elif (($(probe_count "$2" behind) > behind)); then
        echo arrived
    else
        echo dropped
    fi
}

# --- all reach all
for from in a b c; do
    for to in a b; do
        check "$from reaches $to's Redis" pong "$from" "$to"
    done
done
expect "a UDP datagram from a reaches c" "arrived" "$(udp a c)"

# --- net_cut a b, and a connection open across it
mkfifo "$dir/go"
# shellcheck disable=SC2016 # expanded by the inner shell
net_start a holder "$dir" bash -c 'exec 3<>"/dev/tcp/$0/$1" && echo connected >"$2/holder.state" &&
    read -r _ <"$2/go" && printf "PING\r\n" >&3 && read -r -t 30 ans <&3 &&
    echo "$ans" | tr -d "\r" >"$2/holder.answer"' "$B" $P "$dir"
check "a opens a connection to b's Redis" wait_until 5 test -s "$dir/holder.state"

net_cut a b
net_cut a b # idempotent
check "net_cut a b: a does not reach b's Redis" no_pong a b
check "net_cut a b: b does not reach a's Redis" no_pong b a
check "net_cut a b: c reaches a's Redis" pong c a
check "net_cut a b: c reaches b's Redis" pong c b
dropped=$(net_dropped b)
# shellcheck disable=SC2016 # expanded by the inner shell
timeout 5 bash -c 'echo go >"$0"' "$dir/go"
# The PING sent on the open connection reaches b and is dropped, then again: retransmitted.
grew() { (($(net_dropped b) >= dropped + $1)); }
check "the open connection's PING is dropped at b, and retransmitted" wait_until 5 grew 2
check "... the connection is still open (the client waits)" proc_alive holder "$dir"
check "... and no answer came through the cut" test ! -e "$dir/holder.answer"
net_heal
check "net_heal: the PING sent during the cut is answered, on the same connection" \
    wait_until 10 grep -qsx '+PONG' "$dir/holder.answer"
check "net_heal: a reaches b's Redis" pong a b
check "net_heal: b reaches a's Redis" pong b a
proc_stop holder "$dir"

# --- net_cut_oneway a b
dropped_at_a=$(net_dropped a) # counters only grow: what the cut a b dropped is in it
net_cut_oneway a b
check "net_cut_oneway a b: a does not reach b's Redis (its SYN is dropped)" no_pong a b
check "net_cut_oneway a b: b does not reach a's Redis (a's SYN-ACK is dropped)" no_pong b a
dropped=$(net_dropped b)
expect "net_cut_oneway a b: a datagram from a reaches b and is dropped there" \
    "dropped" "$(udp a b)"
check "... and counted by b's net_dropped" grew 1
expect "net_cut_oneway a b: a datagram from b passes into a" "arrived" "$(udp b a)"
expect "net_cut_oneway a b: a datagram from c passes into b" "arrived" "$(udp c b)"
expect "net_cut_oneway a b: nothing dropped at a" "$dropped_at_a" "$(net_dropped a)"
net_heal_pair a b
expect "net_heal_pair a b: a datagram from a passes into b" "arrived" "$(udp a b)"
check "net_heal_pair a b: a reaches b's Redis" pong a b

# --- idempotency, isolate, partition
net_cut a b
net_cut a b
net_heal_pair a b
expect "a cut made twice is healed by one net_heal_pair" "arrived" "$(udp a b)"
net_heal_pair a b # nothing to heal: no error

net_isolate c
expect "net_isolate c: a datagram from a to c is dropped" "dropped" "$(udp a c)"
expect "net_isolate c: a datagram from c to b is dropped" "dropped" "$(udp c b)"
expect "net_isolate c: a datagram from a to b passes" "arrived" "$(udp a b)"
net_heal

net_partition "a" "b c"
expect "net_partition a | b c: a to b dropped" "dropped" "$(udp a b)"
expect "net_partition a | b c: c to a dropped" "dropped" "$(udp c a)"
expect "net_partition a | b c: b to c passes" "arrived" "$(udp b c)"
check "net_partition a | b c: c reaches b's Redis" pong c b
net_heal
for from in a b c; do
    for to in a b c; do
        [[ $from == "$to" ]] && continue
        expect "net_heal: a datagram from $from to $to passes" "arrived" "$(udp "$from" "$to")"
    done
done

# --- net_link_down / net_link_up
net_link_down a
check "net_link_down a: c does not reach a's Redis" no_pong c a
check "net_link_down a: a does not reach b's Redis" no_pong a b
check "net_link_down a: c reaches b's Redis" pong c b
check "net_link_down a: a's Redis still runs (nothing restarted)" proc_alive redis-a "$dir"
net_link_up a
check "net_link_up a: c reaches a's Redis" wait_until 10 pong c a
check "net_link_up a: a reaches b's Redis" wait_until 10 pong a b

# --- net_down
pids=$(cat "$dir/redis-a.pid" "$dir/redis-b.pid")
pid_gone() { ! kill -0 "$1" 2>/dev/null; }
net_down "$dir"
check "net_down: no namespace of the run is left" \
    eq "" "$(ip netns list | awk -v r="$run" '$1 == r || index($1, r "-") == 1')"
expect "net_down: the host's links are as before" "$links_before" "$(host_links)"
for pid in $pids; do
    check "net_down: Redis pid $pid is gone" pid_gone "$pid"
done
check "a second net_down is a no-op" net_down "$dir"
