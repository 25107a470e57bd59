#!/usr/bin/env bash
# The deployment of docs/deploy.md, from the files under deploy/, as the guide says:
#
#   - a self-signed certificate made here (openssl), for nginx's two TLS sides;
#   - PostgreSQL with deploy/postgres/roles.sql run as it stands: the role seckill owns
#     its schema and can do nothing else (checked: no table in public, no database);
#   - Redis from deploy/redis/seckill-redis.conf and users.acl: noeviction, AOF always,
#     the default user (the instances', by password) with exactly the listed commands
#     (the whole sale below runs as that user: a command the service sends that the
#     ACL lacks fails it), user admin with all;
#   - three instances started from deploy/systemd/seckill@.service's own ExecStart,
#     Environment and EnvironmentFile lines (deploy/env/), the secrets as credentials
#     in a directory standing for systemd's %d;
#   - nginx with deploy/nginx/seckill.conf included as it stands.
# The "site:" values (addresses, ports, paths) are replaced by throwaway ones, nothing
# else. Then a sale through it: buyers over HTTPS on the public side; PUT, pay, audit,
# /stats and /metrics refused there and served on the admin side; pay needs the pay
# token, which the admin token is not; the audit consistent and PostgreSQL matching;
# no secret in argv, the environment, the logs, /stats or /metrics. haproxy's file is
# checked with `haproxy -c` when haproxy is installed.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin deploy redis-server redis-cli nginx openssl psql curl jq sha256sum
deploy=$ROOT/deploy
creds=$dir/creds # systemd's %d: the credentials, as LoadCredential copies them
mkdir -p "$creds" "$dir/etc" "$dir/tls"

# --- secrets and the certificate
admin_token=adm-$RANDOM$RANDOM$RANDOM
pay_token=pay-$RANDOM$RANDOM$RANDOM
redis_pw=rpw-$RANDOM$RANDOM$RANDOM
pg_pw=pgpw-$RANDOM$RANDOM$RANDOM
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
    -keyout "$dir/tls/seckill.key" -out "$dir/tls/seckill.crt" >"$dir/openssl.log" 2>&1 ||
    { cat "$dir/openssl.log"; exit 1; }

# --- PostgreSQL, the restricted role
start_pg "$dir" || { echo "postgres did not start"; exit 1; }
pg_port=$STARTED_PORT
psql_as() { # USER DB ARGS...
    local user=$1 db=$2
    shift 2
    PGPASSWORD=$pg_pw psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U "$user" -d "$db" "$@"
}
psql_as postgres postgres -c 'CREATE DATABASE seckill' >/dev/null || exit 1
check "deploy/postgres/roles.sql runs as it stands" \
    psql_as postgres seckill -v password="$pg_pw" -f "$deploy/postgres/roles.sql"
refused() { ! psql_as seckill seckill -c "$1" >/dev/null 2>&1; }
check "... the role cannot create a table outside its schema" refused 'CREATE TABLE public.x (i int)'
check "... nor a database" refused 'CREATE DATABASE other'
echo "postgresql://seckill:$pg_pw@127.0.0.1:$pg_port/seckill" >"$creds/postgres"

# --- Redis: the deployment's conf and ACL file, site values replaced
redis_port=$(free_port) || exit 1
mkdir -p "$dir/redis"
redis_admin_pw=radm-$RANDOM$RANDOM
sha() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
sed -e "s|^user default on #[0-9a-f]* |user default on #$(sha "$redis_pw") |" \
    -e "s|^user admin on #[0-9a-f]* |user admin on #$(sha "$redis_admin_pw") |" \
    "$deploy/redis/users.acl" >"$dir/etc/seckill-users.acl"
sed -e "s|^port 6379$|port $redis_port|" -e "s|^dir .*|dir $dir/redis|" \
    -e "s|^aclfile .*|aclfile $dir/etc/seckill-users.acl|" \
    "$deploy/redis/seckill-redis.conf" >"$dir/etc/seckill-redis.conf"
proc_start redis "$dir" redis-server "$dir/etc/seckill-redis.conf" || exit 1
rcli() { redis-cli -h 127.0.0.1 -p "$redis_port" --no-auth-warning "$@" 2>&1; }
up() { [[ $(rcli --pass "$redis_pw" ping) == PONG ]]; }
check "Redis starts from deploy/redis/seckill-redis.conf" wait_until 15 up
check "... nothing without the password" grep -q NOAUTH <<<"$(rcli ping)"
expect "... the instances' user may not FLUSHALL" "NOPERM" "$(rcli --pass "$redis_pw" flushall | grep -o NOPERM)"
expect "... nor CONFIG SET" "NOPERM" "$(rcli --pass "$redis_pw" config set save '' | grep -o NOPERM)"
expect "... the admin user may" "OK" "$(rcli --user admin --pass "$redis_admin_pw" config set save '')"
setting() { rcli --pass "$redis_pw" config get "$1" | sed -n 2p; }
expect "... noeviction, AOF always" "noeviction yes always" \
    "$(setting maxmemory-policy) $(setting appendonly) $(setting appendfsync)"
printf '%s\n' "$redis_pw" >"$creds/redis-password"
printf '%s\n' "$admin_token" >"$creds/admin-token"
printf '%s\n' "$pay_token" >"$creds/pay-token"

# --- three instances from the template unit's own lines, as systemd would run them:
# the EnvironmentFile files (the shared one, then %i's), the Environment lines (%d: the
# credentials directory), then ExecStart (the binary: this build's).
unit=$deploy/systemd/seckill@.service
ports=()
for i in 1 2 3; do
    p=$(free_port) || exit 1
    ports+=("$p")
    envs=()
    while read -r f; do
        f=${f//%i/$i}
        src=$deploy/env/$(basename "$f")
        while IFS= read -r line; do
            [[ $line =~ ^SECKILL_[A-Z_]+= ]] || continue
            line=${line/#SECKILL_REDIS=*/SECKILL_REDIS=127.0.0.1:$redis_port}
            line=${line/#SECKILL_LISTEN=*/SECKILL_LISTEN=127.0.0.1:$p}
            envs+=("$line")
        done <"$src"
    done < <(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$unit")
    while read -r e; do envs+=("${e//%d/$creds}"); done < <(sed -n 's/^Environment=//p' "$unit")
    exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
    check "instance $i: the unit's ExecStart is the bare binary, flags from the environment" \
        eq "$exec_start" /usr/local/bin/seckill
    proc_start "seckill-$i" "$dir" env -i PATH=/usr/bin:/bin "${envs[@]}" "$SECKILL_BIN_PATH" || exit 1
done
ready() { http_ok "http://127.0.0.1:$1/readyz"; }
for i in 1 2 3; do
    # Slack: an instance is ready in well under a second; 30 s on a busy machine.
    check "instance $i ready" wait_until 30 ready "${ports[i - 1]}" ||
        tail -5 "$dir/seckill-$i.log"
done

# --- nginx: the deployment's file included as it stands, site values replaced
it_deploy_nginx "${ports[0]}" "${ports[1]}" "${ports[2]}" || exit 1
check "nginx -t accepts deploy/nginx/seckill.conf" \
    nginx -t -q -e "$dir/nginx/error.log" -p "$dir/nginx" -c "$dir/nginx/nginx.conf"
proc_start lb "$dir" nginx -e "$dir/nginx/error.log" -p "$dir/nginx" -c "$dir/nginx/nginx.conf" || exit 1
# curl by name, the certificate checked: it is localhost's
P=https://localhost:$pub
A=https://localhost:$adm
tls=(--cacert "$dir/tls/seckill.crt" --resolve "localhost:$pub:127.0.0.1"
    --resolve "localhost:$adm:127.0.0.1" -s --max-time 10)
code() { curl "${tls[@]}" -o /dev/null -w '%{http_code}' "$@"; }
body() { curl "${tls[@]}" "$@"; }
serving() { [[ $(code "$P/skus/none") == 404 ]]; }
check "nginx serves over TLS, its certificate checked" wait_until 15 serving

admin=(-H "Authorization: Bearer $admin_token")
payh=(-H "Authorization: Bearer $pay_token")
# --- the public side: buyers only
expect "public: PUT /skus (admin) refused" "403" "$(code -X PUT "$P/skus/tv" "${admin[@]}" -d '{"stock":1}')"
expect "public: /metrics not there" "404" "$(code "$P/metrics")"
expect "public: /stats not there" "404" "$(code "$P/stats")"
expect "public: the audit not there" "404" "$(code "$P/skus/tv/audit")"
expect "public: /readyz not there" "404" "$(code "$P/readyz")"
expect "public: plain HTTP is refused" "400" \
    "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$pub/skus/tv")"
# --- the admin side
expect "admin side: PUT creates the SKU" "201" \
    "$(code -X PUT "$A/skus/tv" "${admin[@]}" -d '{"stock":20,"segments":4,"pay_within_ms":60000}')"
expect "admin side: PUT without the token is the instance's 401" "401" \
    "$(code -X PUT "$A/skus/tv2" -d '{"stock":1}')"
expect "admin side: /metrics" "200" "$(code "$A/metrics")"

# --- the sale: 30 buyers for 20 units, over HTTPS on the public side
buyers=()
for u in $(seq 1 30); do
    curl "${tls[@]}" -w '\n%{http_code}\n' -X POST "$P/skus/tv/orders" \
        -H "Idempotency-Key: k$u" -d "{\"user_id\":\"u$u\"}" >"$dir/order.$u" &
    buyers+=($!)
done
wait "${buyers[@]}" # not a bare wait: the instances, nginx and the stores are children too
placed=$(grep -lx 201 "$dir"/order.* | wc -l)
sold_out=$(grep -lx 409 "$dir"/order.* | wc -l)
expect "30 buyers over HTTPS for 20 units: 20 placed, 10 sold out" "20 10" "$placed $sold_out"
first=$(grep -lx 201 "$dir"/order.* | head -1)
second=$(grep -lx 201 "$dir"/order.* | sed -n 2p)
o1=$(head -1 "$first" | jq -r .order_id)
o2=$(head -1 "$second" | jq -r .order_id)
u2=$(head -1 "$second" | jq -r .user_id)
expect "public: an order is read back" "200" "$(code "$P/orders/$o1")"
expect "public: pay refused" "404" "$(code -X POST "$P/orders/$o1/pay" "${payh[@]}")"
expect "admin side: pay with the admin token refused (the pay token's route)" "401" \
    "$(code -X POST "$A/orders/$o1/pay" "${admin[@]}" -d '{"payment_id":"p1"}')"
expect "admin side: pay with the pay token" "paid" \
    "$(body -X POST "$A/orders/$o1/pay" "${payh[@]}" -d '{"payment_id":"p1"}' | jq -r .state)"
expect "admin side: the pay token resets nothing" "401" \
    "$(code -X PUT "$A/skus/tv" "${payh[@]}" -d '{"stock":1}')"
expect "public: the buyer cancels" "cancelled" \
    "$(body -X POST "$P/orders/$o2/cancel" -d "{\"user_id\":\"$u2\"}" | jq -r .state)"
matches() { [[ $(body "$A/skus/tv/audit" | jq -r '.consistent and .store.matches and .store.lag_events == 0') == true ]]; }
# Slack: the sink writes within a second; 20 s on a busy machine.
check "admin side: the audit is consistent and PostgreSQL matches" wait_until 20 matches
expect "... 19 units sold (20 placed, 1 cancelled), 1 paid" "19 1" \
    "$(body "$A/skus/tv/audit" | jq -r '"\(.sold) \(.paid)"')"
expect "... in PostgreSQL, in the role's own schema" "20" \
    "$(psql_as seckill seckill -At -c 'SELECT count(*) FROM seckill.seckill_orders')"

# --- no secret anywhere a user or a scrape can see
leaks=()
for i in 1 2 3; do
    pid=$(cat "$dir/seckill-$i.pid")
    tr '\0' ' ' <"/proc/$pid/cmdline" >"$dir/cmdline.$i"
    tr '\0' '\n' <"/proc/$pid/environ" >"$dir/environ.$i"
done
body "$A/stats" >"$dir/stats.json"
body "$A/metrics" >"$dir/metrics.txt"
for s in "$admin_token" "$pay_token" "$redis_pw" "$pg_pw"; do
    for f in "$dir"/cmdline.* "$dir"/environ.* "$dir"/seckill-*.log "$dir/stats.json" "$dir/metrics.txt"; do
        grep -qF -- "$s" "$f" && leaks+=("${s%%-*} in ${f##*/}")
    done
done
expect "no token or password in argv, the environment, the logs, /stats or /metrics" "" "${leaks[*]}"

# --- haproxy's file: valid, when haproxy is here
if command -v haproxy >/dev/null; then
    cat "$dir/tls/seckill.crt" "$dir/tls/seckill.key" >"$dir/tls/seckill.pem"
    sed "s|/etc/seckill/tls/|$dir/tls/|" "$deploy/haproxy/seckill.cfg" >"$dir/haproxy.cfg"
    check "haproxy -c accepts deploy/haproxy/seckill.cfg" haproxy -c -q -f "$dir/haproxy.cfg"
fi

checks_summary
