#!/usr/bin/env bash
# The systemd unit scripts/seckill.service and the readiness protocol behind its
# Type=notify, without systemd: `systemd-analyze verify` finds nothing to say about
# the unit (its ExecStart pointed at the binary under test, its man: link at
# docs/seckill.8), `systemd-analyze security --offline` rates it 2.0 or better (that
# part skipped without systemd-analyze); an instance started with NOTIFY_SOCKET sends
# READY=1 only once it serves (started while Redis is down: nothing until Redis is
# back, and at READY=1 /readyz answers 200), and STOPPING=1 on SIGTERM, then exits 0.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin systemd redis-server redis-cli curl python3

# --- the unit, checked as systemd would load it
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$dir/man/man8"
    cp "$ROOT/docs/seckill.8" "$dir/man/man8/"
    bin=$(cd "$(dirname "$SECKILL_BIN_PATH")" && pwd)/$(basename "$SECKILL_BIN_PATH")
    sed "s|^ExecStart=/usr/local/bin/seckill$|ExecStart=$bin|" \
        "$ROOT/scripts/seckill.service" >"$dir/seckill.service"
    check "the unit's ExecStart is the binary under test" \
        grep -qx "ExecStart=$bin" "$dir/seckill.service"
    MANPATH=$dir/man systemd-analyze verify "$dir/seckill.service" >"$dir/verify.out" 2>&1
    expect "systemd-analyze verify: exit 0" "0" "$?"
    expect "... and nothing to say" "" "$(head -5 "$dir/verify.out")"
    # shellcheck disable=SC2016 # $MAINPID is systemd's, not ours
    for line in 'Type=notify' 'ExecReload=/bin/kill -HUP $MAINPID' 'KillSignal=SIGTERM'; do
        check "the unit says $line" grep -qxF "$line" "$dir/seckill.service"
    done
    systemd-analyze security --offline=true --threshold=20 "$dir/seckill.service" \
        >"$dir/security.out" 2>&1
    expect "systemd-analyze security: exposure 2.0 or better ($(grep -o 'level for .*' "$dir/security.out"))" \
        "0" "$?"
else
    echo "systemd-analyze not installed: the unit's checks skipped"
fi

# --- sd_notify: a listener on a datagram socket stands in for systemd
cat >"$dir/notify.py" <<'PY'
# Receives sd_notify datagrams on argv[1]; for each, one line in argv[3]: the
# message (newlines as blanks) and, at READY=1, what /readyz on port argv[2]
# answered at that moment.
import socket, sys, urllib.error, urllib.request
path, port, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
print("listening", flush=True)
with open(out, "a") as f:
    while True:
        msg = s.recv(4096).decode()
        code = "-"
        if "READY=1" in msg.split("\n"):
            try:
                code = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status
            except urllib.error.HTTPError as e:
                code = e.code
            except Exception:
                code = "refused"
        f.write(f"readyz={code} {msg.replace(chr(10), ' ')}\n")
        f.flush()
PY
start_redis redis "$dir" no || exit 1
rport=$STARTED_PORT
proc_stop redis "$dir" 5 # the instance starts while Redis is down
port=$(free_port) || exit 1
proc_start notify "$dir" python3 "$dir/notify.py" "$dir/notify.sock" "$port" "$dir/notify.out"
wait_until 10 grep -q listening "$dir/notify.log" || { check "the listener is up" false; checks_finish; }
export NOTIFY_SOCKET=$dir/notify.sock
proc_start x "$dir" "$SECKILL_BIN_PATH" --listen "127.0.0.1:$port" --redis "127.0.0.1:$rport" \
    --threads 2
unset NOTIFY_SOCKET
sleep 2
said() { awk -v m="$1" 'index($0, m) { n++ } END { print n + 0 }' "$dir/notify.out"; }
expect "Redis down at start: no READY=1 yet" "0" "$(said READY=1)"
start_redis --port "$rport" redis "$dir" no || exit 1
check "Redis up: READY=1 comes" wait_until 15 grep -q 'READY=1' "$dir/notify.out"
expect "... when /readyz answers 200" "readyz=200" "$(grep 'READY=1' "$dir/notify.out" | cut -d' ' -f1)"
check "... with a STATUS=" grep -q 'READY=1 STATUS=serving' "$dir/notify.out"
expect "... once" "1" "$(said READY=1)"
expect "an order is served" "201" \
    "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$port/skus/n" -d '{"stock":1}')"
expect "no STOPPING=1 before the signal" "0" "$(said STOPPING=1)"
it_expect_clean_exit x
check "SIGTERM: STOPPING=1 came, with STATUS=draining" grep -q 'STOPPING=1 STATUS=draining' "$dir/notify.out"
echo "--- what the listener got:"
cat "$dir/notify.out"

checks_summary
