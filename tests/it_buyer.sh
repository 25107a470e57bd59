#!/usr/bin/env bash
# Buyer identity (issue 51, point 2): with --buyer-key-file, placing, cancelling and
# reading an order need Seckill-Buyer: <user_id>.<expiry>.<signature> (HMAC-SHA256 of
# "<user_id>.<expiry>" keyed with the file's bytes, lowercase hex), checked by the
# instance itself:
#   - no token, a forged one (a signature changed, another key's), an expired one:
#     401 unauthorized, nothing placed, and a cancel with one leaves the order pending;
#   - a valid token with another user_id in the body: 403 forbidden, nothing changed;
#     another buyer's token cancels nothing (403) and reads nothing (404);
#   - the buyer's own token: 201, 200 to read, 200 to cancel; the admin token reads any;
#   - `seckill buyer-token` prints a token openssl's HMAC agrees with; a key file too
#     short or missing: exit 2.
# Fails on bec5c54: no such flag (exit 2), and user_id was trusted.
# About 3 s; no timing slack needed (tokens live 3600 s; the expired one expired in 1970).
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin buyer redis-server curl jq openssl

KEY='the-shop-key-for-the-tests-0123456789'
printf '%s\n' "$KEY" >"$dir/key" # a final newline: not part of the key
printf 'abcde\n' >"$dir/k5"
token() { "$SECKILL_BIN_PATH" buyer-token "$1" --key-file "$dir/key"; }
# a token signed by hand: USER EXPIRY [KEY]
signed() {
    printf '%s.%s.%s' "$1" "$2" "$(printf '%s.%s' "$1" "$2" |
        openssl dgst -sha256 -hmac "${3:-$KEY}" | awk '{print $NF}')"
}

# ---- the subcommand and the flag ---------------------------------------------------
t=$(token a.b:c)
check "buyer-token prints user.expiry.signature ($t)" \
    grep -Eq '^a\.b:c\.[0-9]+\.[0-9a-f]{64}$' <<<"$t"
exp=${t#a.b:c.}
exp=${exp%%.*}
expect "... the signature is openssl's HMAC-SHA256 of user.expiry with the key" \
    "$(signed a.b:c "$exp")" "$t"
check "... expiring about an hour from now" test $((exp - $(date +%s))) -ge 3500
"$SECKILL_BIN_PATH" buyer-token 'a b' --key-file "$dir/key" >/dev/null 2>&1
expect "buyer-token of a bad user id: exit 2" 2 $?
out=$("$SECKILL_BIN_PATH" --buyer-key-file "$dir/k5" --listen 127.0.0.1:1 2>&1)
expect "--buyer-key-file of a 5-byte key: exit 2" 2 $?
# shellcheck disable=SC2016 # eval expands it
check "... saying why, not the key ($out)" eval '[[ $out == *16..1024* && $out != *abcde* ]]'
"$SECKILL_BIN_PATH" --buyer-key-file "$dir/none" --listen 127.0.0.1:1 >/dev/null 2>&1
expect "--buyer-key-file of no file: exit 2" 2 $?

start_redis redis "$dir" no || { echo "redis did not start"; exit 1; }
rport=$STARTED_PORT
start_instance one "$dir" --redis "127.0.0.1:$rport" --buyer-key-file "$dir/key" \
    --admin-token s3cret --log-level warn || exit 1
U=$STARTED_URL
admin=(-H 'Authorization: Bearer s3cret')
curl -s -o /dev/null "${admin[@]}" -X PUT "$U/skus/b" -d '{"stock":10,"segments":2,"pay_within_ms":600000}'

# call METHOD PATH BODY [TOKEN] [curl args]: "status error" (error "-" for none)
call() {
    local hdr=()
    [[ -n ${4:-} ]] && hdr=(-H "Seckill-Buyer: $4")
    curl -s -w '\n%{http_code}' -X "$1" "${hdr[@]}" "${@:5}" -d "$3" "$U$2" |
        { body=$(cat); echo "${body##*$'\n'} $(jq -r '.error // "-"' <<<"${body%$'\n'*}" 2>/dev/null)"; }
}
sold() { curl -s "$U/skus/b" | jq -r .sold; }
ann=$(token ann) bob=$(token bob)

# ---- placing -------------------------------------------------------------------------
expect "an order without a token: 401" "401 unauthorized" "$(call POST /skus/b/orders '{"user_id":"ann"}')"
# forged: the signature's last hex digit changed (to 0, or to 1 when it is 0: one token
# in 16 ends in 0, and "forging" it so left it as it was)
[[ ${ann: -1} == 0 ]] && forged="${ann%?}1" || forged="${ann%?}0"
expect "... with a forged signature: 401" "401 unauthorized" \
    "$(call POST /skus/b/orders '{"user_id":"ann"}' "$forged")"
expect "... with another key's token: 401" "401 unauthorized" \
    "$(call POST /skus/b/orders '{"user_id":"ann"}' "$(signed ann 4102444800 another-key-0123456789)")"
expect "... with an expired token: 401" "401 unauthorized" \
    "$(call POST /skus/b/orders '{"user_id":"ann"}' "$(signed ann 1)")"
expect "... with bob's token for ann: 403" "403 forbidden" \
    "$(call POST /skus/b/orders '{"user_id":"ann"}' "$bob")"
expect "nothing was placed" 0 "$(sold)"
o=$(curl -s -X POST -H "Seckill-Buyer: $ann" -d '{"user_id":"ann"}' "$U/skus/b/orders")
id=$(jq -r '.order_id // empty' <<<"$o")
expect "ann's order with her token: pending" "pending" "$(jq -r .state <<<"$o")"

# ---- cancelling ----------------------------------------------------------------------
state() { curl -s "${admin[@]}" "$U/orders/$id" | jq -r .state; }
expect "a cancel without a token: 401, pending" "401 unauthorized pending" \
    "$(call POST "/orders/$id/cancel" '{"user_id":"ann"}') $(state)"
expect "... with a forged token: 401, pending" "401 unauthorized pending" \
    "$(call POST "/orders/$id/cancel" '{"user_id":"ann"}' "ann.4102444800.$(printf '%064d' 0)") $(state)"
expect "... with an expired token: 401, pending" "401 unauthorized pending" \
    "$(call POST "/orders/$id/cancel" '{"user_id":"ann"}' "$(signed ann 1)") $(state)"
expect "... with bob's token, as ann: 403, pending" "403 forbidden pending" \
    "$(call POST "/orders/$id/cancel" '{"user_id":"ann"}' "$bob") $(state)"
expect "... with bob's token, as bob: 403 (not his order), pending" "403 forbidden pending" \
    "$(call POST "/orders/$id/cancel" '{"user_id":"bob"}' "$bob") $(state)"

# ---- reading -------------------------------------------------------------------------
expect "GET of the order without a token: 401" "401 unauthorized" "$(call GET "/orders/$id" '' '' -G)"
expect "... with bob's token: 404, nothing told" "404 not_found" "$(call GET "/orders/$id" '' "$bob" -G)"
expect "... with ann's: 200" "200 -" "$(call GET "/orders/$id" '' "$ann" -G)"
expect "... with the admin token: 200" "200 -" "$(call GET "/orders/$id" '' '' -G "${admin[@]}")"

expect "ann cancels with her token: 200" "200 -" \
    "$(call POST "/orders/$id/cancel" '{"user_id":"ann"}' "$ann")"
expect "... cancelled" "cancelled" "$(state)"

checks_finish
