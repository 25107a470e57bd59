# shellcheck shell=bash
# net.sh — a private network of network namespaces on this machine, for fault-injection
# tests, and the faults on it: partitions (nft drop rules) and links down. Source it (it
# brings scripts/lib.sh); it needs root (ip netns, nft).
#
#   net_check                    0 when namespaces and nft can be used here; else 1 and
#                                the reason on stdout
#   net_up DIR NODE...           one namespace per NODE on a private bridge, addresses
#                                10.X.Y.(10+i)/24; state in DIR/net/, NET_DIR=DIR. Prints
#                                nothing; on failure whatever it made is gone, status 1
#   net_addr NODE                the node's address
#   net_ns NODE                  the node's namespace (for ip -n, ip netns exec)
#   net_exec NODE CMD...         CMD in the node's namespace (ip netns exec)
#   net_start NODE NAME DIR CMD...  proc_start NAME DIR of CMD in the node's namespace
#                                (DIR/NAME.pid, DIR/NAME.log); net_down stops it
#   net_cut A B                  no packet from A reaches B, none from B reaches A
#   net_cut_oneway FROM TO       packets from FROM to TO dropped; TO to FROM passes
#   net_isolate A                A cut from every other node
#   net_partition "A B" "C D" [...]  every node cut from every node of the other groups
#                                (nodes named in no group keep their links)
#   net_heal                     every cut on every node removed
#   net_heal_pair A B            the cuts between A and B removed (both directions)
#   net_dropped NODE             how many packets the node's cuts dropped so far
#   net_link_down NODE           the node's switch port down: nothing in or out
#   net_link_up NODE             the port up again; returns when the node has carrier
#   net_down [DIR]               everything net_start started stopped (by pid file), any
#                                other process left in the namespaces killed (by pid), the
#                                namespaces deleted (and with them the veths and bridge);
#                                DIR defaults to NET_DIR. Safe twice and from a trap
#   net_reap                     leftovers of dead runs removed: the namespaces (and what
#                                runs in them) of runs whose owner pid is gone
#
# Layout. A run (runid: the owner's pid $$, "x", 4 hex digits) has a hub namespace
# sk<runid> holding only the bridge skb<runid>, and a namespace sk<runid>-<node> per
# node with lo and eth0; eth0's peer is the port p-<node> on the bridge. Nothing of it is
# in the host's own namespace, for three reasons: the host's firewall never sees the
# bridged packets (with br_netfilter loaded, as where Docker runs, the host's FORWARD
# policy would decide over them); no link shows up or can clash in the host's `ip link`;
# and deleting the run's namespaces deletes every link of it, so cleanup cannot miss
# one. The host cannot reach the nodes: a client runs in a node too (net_exec), which is
# also where a Jepsen client sits, on the network it tests. Each namespace has its own
# ports, so every node may listen on the same port.
#
# Addresses. 10.X.Y.0/24, X and Y drawn at random until the /24 overlaps no route of
# the host (ip -4 route show table all): the nodes are unreachable from the host anyway,
# but an address in a log or a test's output then never names something else. IPv6 is
# off on eth0, so IPv4 (and ARP) is all that crosses the bridge: no link-local path
# goes around a cut.
#
# Drop semantics. A cut is an nft drop on the receiving node: each node's table inet
# sknet has a set cut_from and, in its input chain, `ip saddr @cut_from counter drop`.
# Cutting is adding an address to a set, healing is removing it: idempotent, atomic,
# a few milliseconds, no rule ever added twice. The drop is silent: the sender gets no
# error and no ICMP, its packets leave and are lost; TCP retransmits and, after a heal,
# delivers what was sent during the cut; sockets on both ends stay open. ARP is not
# IP and passes, so neighbours stay resolved and nobody gets "no route to host" — as
# across a real partition of routers, where the next hop still answers. Nothing drops
# in the output chain (an output drop fails the sender's sendmsg with EPERM: a loud
# fault, not a partition); the chain is there for a caller that wants such rules of
# its own. Rules are stateless, so established connections are cut as well as new ones.
#
# A link down is the other fault: the node's port on the bridge goes down, the node's
# eth0 loses carrier. Its sockets stay open and see nothing; a new connection from it
# fails after about 3 s with "no route to host" (ARP cannot resolve), as with a pulled
# cable; its peers see silence. (Taking eth0 itself down would remove the node's route
# and fail its sends at once: a louder fault than a network.)
#
# State in DIR/net/: run (runid subnet), nodes (node namespace address port, one line
# each), procs (name dir of each net_start). net_up sets NET_DIR in the shell that calls
# it (so not in a $(...)); another shell reaches the network by setting NET_DIR=DIR.

# shellcheck source=scripts/lib.sh
[[ $(type -t proc_start) == function ]] || source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/lib.sh"

NET_DIR=${NET_DIR:-}
_NET_RUN_RE='^sk([0-9]+)x[0-9a-f]{4}(-.*)?$'

net_check() {
    local ns err t
    ns=sk$$x$(printf '%04x' $((RANDOM % 65536)))-check
    if (($(id -u) != 0)); then
        echo "not root: network namespaces need root"
        return 1
    fi
    for t in ip nft; do
        command -v "$t" >/dev/null || {
            echo "$t not installed (scripts/deps.sh installs it)"
            return 1
        }
    done
    err=$(ip netns add "$ns" 2>&1) || {
        echo "cannot create a network namespace: $err"
        return 1
    }
    err=$(ip netns exec "$ns" nft add table inet sknet 2>&1) || {
        ip netns del "$ns" 2>/dev/null
        echo "cannot use nft in a namespace: $err"
        return 1
    }
    ip netns del "$ns"
}

# _net_load: reads NET_DIR/net into _NET_RUNID, _NET_HUB, _NET_NODES
# (names in order) and the maps _NET_NS, _NET_ADDR, _NET_PORT. 1 when no network is up.
_net_load() {
    local d=$NET_DIR node ns addr port
    if [[ -z $d || ! -s $d/net/run ]]; then
        log "net: no network is up (net_up, or NET_DIR)"
        return 1
    fi
    read -r _NET_RUNID _ <"$d/net/run"
    _NET_HUB=sk$_NET_RUNID
    _NET_NODES=()
    declare -gA _NET_NS=() _NET_ADDR=() _NET_PORT=()
    if [[ -f $d/net/nodes ]]; then
        while read -r node ns addr port; do
            _NET_NODES+=("$node")
            _NET_NS[$node]=$ns
            _NET_ADDR[$node]=$addr
            _NET_PORT[$node]=$port
        done <"$d/net/nodes"
    fi
}

_net_known() { # NODE...: 1 (and a message) for a name that is no node
    local n
    for n in "$@"; do
        [[ -n ${_NET_NS[$n]+x} ]] || {
            log "net: no node '$n' (nodes: ${_NET_NODES[*]})"
            return 1
        }
    done
}

# _net_routes: the destinations of the host's IPv4 routes (a.b.c.d/len), default aside.
_net_routes() {
    ip -4 route show table all 2>/dev/null | awk '
        $1 ~ /^(unicast|local|broadcast|multicast|unreachable|prohibit|blackhole|throw|nat|anycast)$/ { d = $2; }
        $1 !~ /^(unicast|local|broadcast|multicast|unreachable|prohibit|blackhole|throw|nat|anycast)$/ { d = $1; }
        d ~ /^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+/ { print d; }'
}

_net_ip2int() { # a.b.c.d -> integer
    local a b c d
    IFS=. read -r a b c d <<<"$1"
    echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# _net_pick_subnet: prints 10.X.Y (a /24) that overlaps no route of the host.
_net_pick_subnet() {
    local routes=() r try x y cand net len m clash
    mapfile -t routes < <(_net_routes)
    for ((try = 0; try < 100; try++)); do
        x=$((100 + RANDOM % 150))
        y=$((RANDOM % 256))
        cand=$(_net_ip2int "10.$x.$y.0")
        clash=0
        for r in "${routes[@]}"; do
            net=$(_net_ip2int "${r%/*}")
            len=32
            [[ $r == */* ]] && len=${r#*/}
            m=$((len < 24 ? len : 24))
            ((m == 0)) && continue
            if (((cand >> (32 - m)) == (net >> (32 - m)))); then
                clash=1
                break
            fi
        done
        ((clash)) || {
            echo "10.$x.$y"
            return 0
        }
    done
    log "net: no free 10.X.Y.0/24 found"
    return 1
}

_net_has_carrier() { # NAMESPACE LINK
    ip -n "$1" -o link show "$2" 2>/dev/null | grep -q 'LOWER_UP'
}

# net_up DIR NODE...: see the header. NET_DIR=DIR afterwards.
net_up() {
    local dir=$1 node i=0 runid subnet hub ns addr port
    shift
    (($# > 0)) || {
        log "net_up: no nodes"
        return 1
    }
    (($# <= 200)) || {
        log "net_up: at most 200 nodes"
        return 1
    }
    declare -A seen=()
    for node in "$@"; do
        # p-<node> must fit in 15 characters (a link name's limit)
        [[ $node =~ ^[A-Za-z0-9][A-Za-z0-9_]{0,12}$ ]] || {
            log "net_up: bad node name '$node' (letters, digits, _; at most 13)"
            return 1
        }
        [[ -z ${seen[$node]+x} ]] || {
            log "net_up: node '$node' named twice"
            return 1
        }
        seen[$node]=1
    done
    mkdir -p "$dir/net" || return 1
    dir=$(cd "$dir" && pwd)
    if [[ -s $dir/net/run ]]; then
        log "net_up: a network is already up in $dir (net_down it first)"
        return 1
    fi
    subnet=$(_net_pick_subnet) || return 1
    runid=$$x$(printf '%04x' $((RANDOM % 65536)))
    hub=sk$runid
    # The run file first: a net_down after a failure half-way finds what was made.
    echo "$runid $subnet" >"$dir/net/run"
    : >"$dir/net/nodes"
    : >"$dir/net/procs"
    NET_DIR=$dir
    if ! {
        ip netns add "$hub" &&
            ip -n "$hub" link add "skb$runid" type bridge &&
            ip -n "$hub" link set "skb$runid" up
    }; then
        log "net_up: the hub namespace $hub could not be made"
        net_down "$dir"
        return 1
    fi
    for node in "$@"; do
        i=$((i + 1))
        ns=$hub-$node
        addr=$subnet.$((10 + i))
        port=p-$node
        if ! {
            ip netns add "$ns" &&
                ip -n "$hub" link add "$port" type veth peer name eth0 netns "$ns" &&
                ip -n "$hub" link set "$port" master "skb$runid" up &&
                ip netns exec "$ns" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1 &&
                ip -n "$ns" addr add "$addr/24" dev eth0 &&
                ip -n "$ns" link set lo up &&
                ip -n "$ns" link set eth0 up &&
                ip netns exec "$ns" nft -f - <<EOF
table inet sknet {
    set cut_from {
        type ipv4_addr
    }
    chain input {
        type filter hook input priority filter; policy accept;
        ip saddr @cut_from counter drop
    }
    chain output {
        type filter hook output priority filter; policy accept;
    }
}
EOF
        }; then
            log "net_up: node $node ($ns) could not be made"
            net_down "$dir"
            return 1
        fi
        echo "$node $ns $addr $port" >>"$dir/net/nodes"
    done
    for node in "$@"; do
        if ! wait_until 5 _net_has_carrier "$hub-$node" eth0; then
            log "net_up: node $node's eth0 has no carrier after 5 s"
            net_down "$dir"
            return 1
        fi
    done
}

net_addr() {
    _net_load && _net_known "$1" || return 1
    echo "${_NET_ADDR[$1]}"
}

net_ns() {
    _net_load && _net_known "$1" || return 1
    echo "${_NET_NS[$1]}"
}

net_exec() {
    local node=$1
    shift
    _net_load && _net_known "$node" || return 1
    ip netns exec "${_NET_NS[$node]}" "$@"
}

# net_start NODE NAME DIR CMD...: `ip netns exec` becomes CMD (same pid), so the pid
# file names CMD itself and proc_stop NAME DIR stops it.
net_start() {
    local node=$1 name=$2 pdir=$3
    shift 3
    _net_load && _net_known "$node" || return 1
    pdir=$(cd "$pdir" && pwd) || return 1
    echo "$name $pdir" >>"$NET_DIR/net/procs"
    proc_start "$name" "$pdir" ip netns exec "${_NET_NS[$node]}" "$@"
}

# _net_elements OP NODE ADDR...: OP (add or delete) the ADDRs in NODE's cut_from set.
# A delete adds first in the same transaction, so deleting an absent address is no error.
_net_elements() {
    local op=$1 node=$2 list
    shift 2
    (($# > 0)) || return 0
    list=$(printf '%s, ' "$@")
    list="{ ${list%, } }"
    {
        echo "add element inet sknet cut_from $list"
        if [[ $op == delete ]]; then echo "delete element inet sknet cut_from $list"; fi
    } | ip netns exec "${_NET_NS[$node]}" nft -f - || {
        log "net: nft $op on $node failed"
        return 1
    }
}

net_cut_oneway() {
    _net_load && _net_known "$1" "$2" || return 1
    _net_elements add "$2" "${_NET_ADDR[$1]}"
}

net_cut() {
    _net_load && _net_known "$1" "$2" || return 1
    _net_elements add "$2" "${_NET_ADDR[$1]}" && _net_elements add "$1" "${_NET_ADDR[$2]}"
}

net_heal_pair() {
    _net_load && _net_known "$1" "$2" || return 1
    _net_elements delete "$2" "${_NET_ADDR[$1]}" && _net_elements delete "$1" "${_NET_ADDR[$2]}"
}

net_isolate() {
    local a=$1 n others=()
    _net_load && _net_known "$a" || return 1
    for n in "${_NET_NODES[@]}"; do
        [[ $n == "$a" ]] && continue
        others+=("${_NET_ADDR[$n]}")
        _net_elements add "$n" "${_NET_ADDR[$a]}" || return 1
    done
    _net_elements add "$a" "${others[@]}"
}

# net_partition GROUP GROUP...: each GROUP a space-separated list of nodes.
net_partition() {
    local g h n groups=("$@") far
    declare -A group_of=()
    _net_load || return 1
    (($# >= 2)) || {
        log "net_partition: two groups or more"
        return 1
    }
    for ((g = 0; g < $#; g++)); do
        for n in ${groups[g]}; do
            _net_known "$n" || return 1
            [[ -z ${group_of[$n]+x} ]] || {
                log "net_partition: $n is in two groups"
                return 1
            }
            group_of[$n]=$g
        done
    done
    for n in "${!group_of[@]}"; do
        far=()
        for h in "${!group_of[@]}"; do
            ((group_of[$h] != group_of[$n])) && far+=("${_NET_ADDR[$h]}")
        done
        _net_elements add "$n" "${far[@]}" || return 1
    done
}

net_heal() {
    local n
    _net_load || return 1
    for n in "${_NET_NODES[@]}"; do
        ip netns exec "${_NET_NS[$n]}" nft flush set inet sknet cut_from || {
            log "net_heal: nft flush on $n failed"
            return 1
        }
    done
}

net_dropped() {
    _net_load && _net_known "$1" || return 1
    ip netns exec "${_NET_NS[$1]}" nft list chain inet sknet input |
        sed -n 's/.*@cut_from counter packets \([0-9]*\) .*/\1/p'
}

net_link_down() {
    _net_load && _net_known "$1" || return 1
    ip -n "$_NET_HUB" link set "${_NET_PORT[$1]}" down
}

net_link_up() {
    _net_load && _net_known "$1" || return 1
    ip -n "$_NET_HUB" link set "${_NET_PORT[$1]}" up || return 1
    wait_until 5 _net_has_carrier "${_NET_NS[$1]}" eth0 || {
        log "net_link_up: $1's eth0 has no carrier after 5 s"
        return 1
    }
}

_net_ns_exists() { [[ -e /run/netns/$1 ]]; }
_net_ns_empty() { [[ -z $(ip netns pids "$1" 2>/dev/null) ]]; }

_net_cmdline() { # PID: its command line on one line, at most 80 characters
    tr '\0\n' '  ' <"/proc/$1/cmdline" 2>/dev/null | sed -e 's/  */ /g' -e 's/ $//' | cut -c1-80
}

# _net_kill_ns NS: every process still in namespace NS (none of net_start's, those are
# stopped already) gets SIGTERM, then SIGKILL after 5 s. 1 when one survives.
_net_kill_ns() {
    local ns=$1 pid
    _net_ns_empty "$ns" && return 0
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
        log "net: stray pid $pid in $ns ($(_net_cmdline "$pid")): SIGTERM"
        kill -TERM "$pid" 2>/dev/null || true
    done
    wait_until 5 _net_ns_empty "$ns" && return 0
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
        kill -KILL "$pid" 2>/dev/null || true
    done
    wait_until 5 _net_ns_empty "$ns" && return 0
    log "net: processes in $ns survived SIGKILL: $(ip netns pids "$ns" | tr '\n' ' ')"
    return 1
}

# _net_del_run RUNID: the run's namespaces (nodes first, the hub last) emptied and gone.
_net_del_run() {
    local runid=$1 ns rc=0 all=()
    mapfile -t all < <(ip netns list 2>/dev/null | awk -v h="sk$runid" '$1 == h || index($1, h "-") == 1 { print $1 }')
    for ns in "${all[@]}"; do
        [[ $ns == "sk$runid" ]] && continue
        _net_kill_ns "$ns" || rc=1
        ip netns del "$ns" 2>/dev/null || { _net_ns_exists "$ns" && rc=1; }
    done
    if _net_ns_exists "sk$runid"; then
        _net_kill_ns "sk$runid" || rc=1
        ip netns del "sk$runid" 2>/dev/null || { _net_ns_exists "sk$runid" && rc=1; }
    fi
    return "$rc"
}

net_down() {
    local d=${1:-$NET_DIR} runid pdir name rc=0
    [[ -n $d && -s $d/net/run ]] || return 0
    read -r runid _ <"$d/net/run"
    if [[ -f $d/net/procs ]]; then
        while read -r name pdir; do
            proc_stop "$name" "$pdir" 5 || rc=1
        done <"$d/net/procs"
    fi
    _net_del_run "$runid" || rc=1
    if ((rc == 0)); then
        rm -f "$d/net/run" "$d/net/nodes" "$d/net/procs"
        rmdir "$d/net" 2>/dev/null || true
        [[ $NET_DIR == "$d" ]] && NET_DIR=""
    else
        log "net_down: $d's network not entirely gone (state kept in $d/net)"
    fi
    return "$rc"
}

net_reap() {
    local ns runid rc=0
    declare -A runs=()
    while read -r ns _; do
        [[ $ns =~ $_NET_RUN_RE ]] || continue
        [[ -d /proc/${BASH_REMATCH[1]} ]] && continue
        runid=${ns#sk}
        runs[${runid%%-*}]=${BASH_REMATCH[1]}
    done < <(ip netns list 2>/dev/null)
    for runid in "${!runs[@]}"; do
        log "net_reap: run $runid's owner (pid ${runs[$runid]}) is gone: removing its namespaces"
        _net_del_run "$runid" || rc=1
    done
    return "$rc"
}
