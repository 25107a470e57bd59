#!/usr/bin/env bash
# The manual page docs/seckill.8 (installed as seckill(8) by make install): it renders
# without a warning (groff -ww), and names every flag and environment variable that
# `seckill --help` prints, each flag as an entry of its own. Skipped without groff.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin man
if ! command -v groff >/dev/null; then
    echo "groff not installed: skipped"
    exit 77
fi
page=$ROOT/docs/seckill.8

groff -man -Tutf8 -ww -z "$page" 2>"$dir/warnings"
expect "groff -man -ww renders docs/seckill.8 without a warning" "" "$(head -5 "$dir/warnings")"
if command -v man >/dev/null; then
    MANWIDTH=80 man --warnings -l "$page" >/dev/null 2>"$dir/man.warnings"
    expect "man -l renders it without a warning" "" "$(head -5 "$dir/man.warnings")"
fi
groff -man -Tascii -P-cbou "$page" 2>/dev/null >"$dir/page.txt"
check "the page names itself seckill(8)" grep -q '^SECKILL(8)' "$dir/page.txt"

"$SECKILL_BIN_PATH" --help >"$dir/help"
flags=$(grep -Eo '^  --[a-z0-9-]+' "$dir/help" | sed 's/^ *//')
envs=$(grep -Eo 'env SECKILL_[A-Z0-9_]+' "$dir/help" | sed 's/^env //')
check "--help lists flags ($(wc -w <<<"$flags")) and variables ($(wc -w <<<"$envs"))" \
    test -n "$flags" -a -n "$envs"
missing=()
for f in $flags; do
    grep -Eq "^ +$f( |$)" "$dir/page.txt" || missing+=("$f")
done
expect "every flag of --help is an entry of the page" "" "${missing[*]}"
missing=()
for e in $envs; do
    grep -q "$e" "$dir/page.txt" || missing+=("$e")
done
expect "every variable of --help is in the page" "" "${missing[*]}"
extra=()
while read -r f; do
    grep -Eq "^  $f( |$)" "$dir/help" || extra+=("$f")
done < <(grep -Eo '^ +--[a-z0-9-]+' "$dir/page.txt" | sed 's/^ *//' | sort -u)
expect "no entry of the page is a flag --help does not know" "" "${extra[*]}"

checks_summary
