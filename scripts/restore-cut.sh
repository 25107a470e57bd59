#!/usr/bin/env bash
# restore-cut.sh — after a restore, PostgreSQL brought back to what the restored Redis
# knows (docs/runbook.md, "Restore"): run it once both stores are restored and before
# any instance starts.
#
#   scripts/restore-cut.sh [--at MS] PG [REDIS-CLI ARGS...]
#
#   PG              the database: a libpq connection string or URI, or @FILE to read it
#                   from a file (the instances' --postgres-file: no password in argv)
#   REDIS-CLI ARGS  how to reach the restored data Redis (-h HOST -p PORT, --user admin
#                   with REDISCLI_AUTH; -c for a Redis Cluster, any master)
#   --at MS         the Redis backup's time (Unix ms; scripts/redis-backup.sh prints it):
#                   the cut of a stream the restored Redis does not have (below)
#
# Why: the backups are taken Redis first, PostgreSQL second, so the database has every
# change the Redis copy has (the sink trims a stream only below what reached the
# database), and also the changes made between the two backups, which the restored
# Redis lost: orders it no longer has, pays and cancels it no longer saw. Each outbox
# stream is ordered (ids only grow), so its last id in the restored Redis (XINFO STREAM's
# last-generated-id) cuts its events in two: up to it, what Redis has; after it, what
# it lost. A stream the restored Redis does not list (a SKU made after its backup, or
# retired before it) is cut at --at, else at the newest id of any stream it has.
#
# In one transaction, the events after the cut move to seckill_events_after_restore, the
# orders left with no event to seckill_orders_after_restore (each row with the moment
# it was set aside), and every other order they touched takes back the furthest state
# of its events left (a paid order whose pay was cut is pending again, its payment_id
# gone). Nothing is deleted: those two tables are the acknowledged orders and pays the
# restore lost, for whoever must contact the buyers or repay (runbook). Prints a line
# per stream cut and the counts set aside. Running it again sets aside nothing more.
set -euo pipefail
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 2
}
at=""
if [[ $1 == --at ]]; then
    at=${2:-}
    [[ $at =~ ^[0-9]+$ ]] || { echo "restore-cut: --at wants Unix milliseconds" >&2; exit 2; }
    shift 2
fi
pg=$1
shift
if [[ $pg == @* ]]; then
    pg=$(head -n 1 "${pg#@}") || { echo "restore-cut: cannot read ${pg#@}" >&2; exit 1; }
fi
rcli() { redis-cli --no-auth-warning "$@"; }
cli=("$@")

# The restored Redis's streams and their last ids: "stream ms seq" lines.
cuts=$(mktemp)
trap 'rm -f "$cuts"' EXIT
rcli "${cli[@]}" smembers seckill:streams >"$cuts.keys" || { echo "restore-cut: Redis does not answer" >&2; exit 1; }
while IFS= read -r key; do
    [[ -n $key ]] || continue
    last=$(rcli "${cli[@]}" xinfo stream "$key" 2>/dev/null |
        awk 'prev == "last-generated-id" { print; exit } { prev = $0 }')
    [[ $last =~ ^([0-9]+)-([0-9]+)$ ]] || last=0-0 # listed, gone: nothing kept
    printf '%s\t%s\t%s\n' "$key" "${last%-*}" "${last#*-}" >>"$cuts"
done <"$cuts.keys"
rm -f "$cuts.keys"

psql -X -q -v ON_ERROR_STOP=1 -At -d "$pg" <<EOF
BEGIN;
-- plain tables dropped at the end: the instances' role may not make temporary ones
CREATE TABLE seckill_restore_cut (stream text PRIMARY KEY, ms bigint NOT NULL, seq bigint NOT NULL);
COPY seckill_restore_cut FROM STDIN;
$(cat "$cuts")
\.
-- a stream Redis does not have: at --at, else at the newest id of those it has
INSERT INTO seckill_restore_cut
  SELECT DISTINCT e.stream,
         COALESCE(${at:-NULL}, (SELECT max(ms) FROM seckill_restore_cut), 0),
         CASE WHEN ${at:-NULL}::bigint IS NULL THEN COALESCE((SELECT max(seq)
              FROM seckill_restore_cut
              WHERE ms = (SELECT max(ms) FROM seckill_restore_cut)), 0) ELSE 9223372036854775807 END
  FROM seckill_events e WHERE NOT EXISTS (SELECT 1 FROM seckill_restore_cut c WHERE c.stream = e.stream);
CREATE TABLE IF NOT EXISTS seckill_events_after_restore
  (LIKE seckill_events, set_aside_at timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS seckill_orders_after_restore
  (LIKE seckill_orders, set_aside_at timestamptz NOT NULL);
CREATE TABLE seckill_restore_gone AS
  SELECT e.* FROM seckill_events e JOIN seckill_restore_cut c ON c.stream = e.stream
  -- an event's id is its entry's "ms-seq", "/k" after it for the k-th of an entry of several
  WHERE (split_part(e.event_id, '-', 1)::bigint,
         split_part(split_part(e.event_id, '/', 1), '-', 2)::bigint) > (c.ms, c.seq);
DELETE FROM seckill_events e USING seckill_restore_gone g
  WHERE e.stream = g.stream AND e.event_id = g.event_id;
INSERT INTO seckill_events_after_restore SELECT g.*, now() FROM seckill_restore_gone g;
-- orders left with no event: Redis never had them
WITH lost AS (DELETE FROM seckill_orders o
  WHERE o.order_id IN (SELECT order_id FROM seckill_restore_gone)
    AND NOT EXISTS (SELECT 1 FROM seckill_events e WHERE e.order_id = o.order_id)
  RETURNING o.*)
INSERT INTO seckill_orders_after_restore SELECT l.*, now() FROM lost l;
-- the others: the furthest state of the events left (rank as the sink's: placed and
-- pending 1, the ends 2)
UPDATE seckill_orders o SET state = f.state, rank = f.rank, changed_at = f.at,
    payment_id = CASE WHEN f.state = 'paid' THEN o.payment_id END
  FROM (SELECT DISTINCT ON (e.order_id) e.order_id, e.state, e.at,
               CASE WHEN e.state IN ('placed', 'pending') THEN 1 ELSE 2 END AS rank
        FROM seckill_events e WHERE e.order_id IN (SELECT order_id FROM seckill_restore_gone)
        ORDER BY e.order_id, rank DESC, e.at DESC) f
  WHERE o.order_id = f.order_id AND o.state <> f.state;
SELECT 'restore-cut: ' || c.stream || ' cut after ' || c.ms || '-' || c.seq || ': '
       || count(g.event_id) || ' events set aside'
  FROM seckill_restore_cut c LEFT JOIN seckill_restore_gone g ON g.stream = c.stream
  GROUP BY c.stream, c.ms, c.seq
  ORDER BY c.stream;
SELECT 'restore-cut: ' || (SELECT count(*) FROM seckill_restore_gone) || ' events and '
       || (SELECT count(*) FROM seckill_orders_after_restore WHERE set_aside_at = now())
       || ' orders set aside (seckill_events_after_restore, seckill_orders_after_restore)';
DROP TABLE seckill_restore_cut, seckill_restore_gone;
COMMIT;
EOF
