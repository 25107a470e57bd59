#!/usr/bin/env bash
# redis-backup.sh — a copy of the data Redis's AOF, taken while it serves (docs/runbook.md,
# "Backup"). Run it on the Redis host, as a user who may read Redis's data dir.
#
#   scripts/redis-backup.sh DEST [REDIS-CLI ARGS...]
#
#   DEST             a directory to create (it must not exist): the AOF directory is
#                    copied into it (DEST/appendonlydir/, base, incr files and manifest)
#   REDIS-CLI ARGS   how to reach Redis as a user who may CONFIG SET and INFO
#                    (deploy/redis/users.acl's admin): -h HOST -p PORT --user admin, with
#                    the password in REDISCLI_AUTH (never on the command line)
#
# The steps are Redis's own for an AOF backup: automatic rewrites turned off (a rewrite
# replaces the base file and the manifest while the copy runs), no rewrite in progress,
# the directory copied, rewrites turned back on to what they were (also when the copy
# fails). With appendfsync always every acknowledged order is in the files before its
# 201; the copy is the log up to some moment of the copy, and the incremental file's
# last command, cut by the copy, is dropped at load (aof-load-truncated yes, the
# default; a MULTI cut before its EXEC is dropped whole). Prints the copy's size and
# the moment it ended (the Redis TIME). Exit 1 when anything failed (DEST then holds
# no copy to trust: it is removed).
set -euo pipefail
[[ $# -ge 1 && $1 != -h && $1 != --help ]] || {
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
    exit 2
}
dest=$1
shift
rcli() { redis-cli --no-auth-warning "$@"; }
setting() { rcli "${cli[@]}" config get "$1" | sed -n 2p; }
cli=("$@")
[[ ! -e $dest ]] || { echo "redis-backup: $dest exists" >&2; exit 1; }
[[ $(setting appendonly) == yes ]] || { echo "redis-backup: appendonly is not yes: no AOF to copy" >&2; exit 1; }
data=$(setting dir)
aof=$(setting appenddirname)
[[ -n $data && -n $aof && -d $data/$aof ]] ||
    { echo "redis-backup: no AOF directory '$data/$aof' here (run this on the Redis host)" >&2; exit 1; }
was=$(setting auto-aof-rewrite-percentage)
restore() { rcli "${cli[@]}" config set auto-aof-rewrite-percentage "$was" >/dev/null; }
trap restore EXIT
[[ $(rcli "${cli[@]}" config set auto-aof-rewrite-percentage 0) == OK ]] ||
    { echo "redis-backup: CONFIG SET refused (this user may not)" >&2; exit 1; }
rewriting() { rcli "${cli[@]}" info persistence | tr -d '\r' | grep -q '^aof_rewrite_in_progress:1'; }
# A rewrite already running finishes on its own (seconds for gigabytes); wait up to 10 min.
for ((i = 0; i < 6000; i++)); do rewriting || break; sleep 0.1; done
rewriting && { echo "redis-backup: an AOF rewrite still runs after 10 min" >&2; exit 1; }
mkdir -p "$dest"
if ! cp -a "$data/$aof" "$dest/"; then
    rm -rf "$dest"
    echo "redis-backup: the copy failed" >&2
    exit 1
fi
sync -f "$dest/$aof" 2>/dev/null || sync
echo "redis-backup: $(du -sh "$dest/$aof" | cut -f1) copied to $dest/$aof, ended at Redis time $(rcli "${cli[@]}" time | head -1)"
