#!/usr/bin/env bash
# Docs: every relative link of README.md and docs/*.md resolves inside the repository
# (files, and #anchors into Markdown headings: tests/doc_links.mjs); the flags table of
# docs/operations.md says what `seckill --help` says (flag, argument, default,
# environment variable), row for row; nothing refers to ../shared/ (the contract and
# the style guide live in docs/). Needs node (no npm packages). Seconds.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin docs node

# --- links
out=$(node "$ROOT/tests/doc_links.mjs" "$ROOT"/README.md "$ROOT"/docs/*.md 2>&1)
echo "$out"
check "every relative link of README.md and docs/*.md resolves" eq "$(grep -c '^FAIL' <<<"$out")" 0

# --- seckill --help against docs/operations.md's flags table, as
# "--flag ARG | default | SECKILL_ENV" lines
"$SECKILL_BIN_PATH" --help >"$dir/help" 2>&1
check "seckill --help exits 0" eq "$?" 0
awk '/^  --/ && !/^  --(help|version) / {
        line = $0
        if ((getline envline) <= 0) envline = ""
        sub(/^ +env /, "", envline)
        if (!match(line, /\(default: .*\)$/)) { print "unparsed: " line; next }
        dflt = substr(line, RSTART + 10, RLENGTH - 11)
        sub(/ *\(default: .*\)$/, "", line)
        split(substr(line, 3), w, " ")
        print w[1] " " w[2] " | " dflt " | " envline
    }' "$dir/help" | sort >"$dir/help.flags"
awk '/^## Flags/ { on = 1; next } /^## / { on = 0 }
     on && /^\| `--/ {
        gsub(/\\\|/, "\001")           # an escaped | inside a cell
        n = split($0, c, "|")
        for (i = 2; i <= 4; i++) { gsub(/^ +| +$|`/, "", c[i]); gsub("\001", "|", c[i]) }
        print c[2] " | " c[3] " | " c[4]
     }' "$ROOT/docs/operations.md" | sort >"$dir/doc.flags"
check "--help lists flags ($(wc -l <"$dir/help.flags"))" test -s "$dir/help.flags"
if ! check "docs/operations.md's flags table matches seckill --help" \
    cmp -s "$dir/help.flags" "$dir/doc.flags"; then
    echo "< only in --help, > only in docs/operations.md:"
    diff "$dir/help.flags" "$dir/doc.flags" | grep '^[<>]'
fi

# --- no reference to ../shared/ (outside .git and what is git-ignored)
refs=$(cd "$ROOT" && git grep -n -e '\.\./shared/' -e '/work/shared' -- . ':!tests/it_docs.sh' 2>/dev/null)
check "nothing in the repository refers to ../shared/" eq "$refs" ""
[[ -z $refs ]] || echo "$refs"

checks_summary
