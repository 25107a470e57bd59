#!/usr/bin/env bash
# What the repository says against what the code does, for the claims that drift:
#
#   - error codes: the (status, error) pairs the C code answers (every svc_error call
#     and every literal {"error":...} body in service/*.c) are the rows of docs/api.md's
#     error table and of the README's, and the error names are docs/openapi.yaml's
#     Error enum: one set, in four places;
#   - every status the C code answers has a label of its own in
#     seckill_http_requests_total (route_codes in service/metrics.c), none "other";
#   - the man page's ROUTES are service/routes.c's route table, method and path;
#   - each number flag's range, as the binary enforces it (its message for a bad
#     value), is in `seckill --help`, in docs/operations.md's row and in the man page;
#   - the README's demo table has a row for every lock mode of --help, each row's
#     figures agree with each other, and a date and a commit of this repository stand
#     beside it (the run it is the output of).
# Reads files and runs `seckill --help`; no server. Seconds.
set -uo pipefail
# shellcheck source=tests/lib.sh
source "$(dirname "$0")/lib.sh"
it_begin consistency python3 groff
bin=$SECKILL_BIN_PATH

# --- error codes, as "status code" lines, sorted, one file per place
python3 - "$ROOT" "$dir" <<'EOF'
import re, sys, glob, yaml
root, out = sys.argv[1], sys.argv[2]
def write(name, pairs):
    with open(f"{out}/{name}", "w") as f:
        f.write("".join(f"{p}\n" for p in sorted(set(pairs))))
c = []
for path in sorted(glob.glob(f"{root}/service/*.c")):
    text = open(path).read()
    c += [f"{st} {code}" for st, code in
          re.findall(r'svc_error\(\s*[^,()]+,\s*(\d{3}),\s*"([a-z_]+)"', text)]
    # a body written whole: its status is the last one named in the 600 characters
    # before it ("res->status = 503;", "HTTP/1.1 408 ...")
    for m in re.finditer(r'\\"error\\":\\"([a-z_]+)\\"', text):
        sts = re.findall(r'\b([1-5]\d\d)\b', text[max(0, m.start() - 600):m.start()])
        c.append(f"{sts[-1] if sts else '???'} {m.group(1)}")
write("codes.c", c)
def table_pairs(md):
    pairs = []
    for st, cell in re.findall(r'^\| (\d{3}) \| (`[a-z_]+`(?: / `[a-z_]+`)*) \|', md, re.M):
        pairs += [f"{st} {code}" for code in re.findall(r'`([a-z_]+)`', cell)]
    return pairs
api = open(f"{root}/docs/api.md").read()
api = api[api.index("## Statuses and errors"):]
api = api[:api.index("\n\n", api.index("| status |"))]
write("codes.api", table_pairs(api))
readme = open(f"{root}/README.md").read()
readme = readme[readme.index("| status | error | when |"):]
readme = readme[:readme.index("\n\n")]
write("codes.readme", table_pairs(readme))
doc = yaml.safe_load(open(f"{root}/docs/openapi.yaml"))
write("names.openapi", doc["components"]["schemas"]["Error"]["properties"]["error"]["enum"])
write("names.c", [p.split()[1] for p in c])
write("status.c", [p.split()[0] for p in c])
m = re.search(r'route_codes\[ROUTE_NCODES\] = \{([^}]*)\}', open(f"{root}/service/metrics.c").read())
write("status.metrics", [s.strip() for s in m.group(1).split(",") if s.strip() != "0"])
EOF
check "the C code answers errors ($(wc -l <"$dir/codes.c") status and code pairs)" \
    test "$(wc -l <"$dir/codes.c")" -ge 15
expect "no error body in the C code whose status could not be told" "" \
    "$(grep '^???' "$dir/codes.c")"
for place in api:docs/api.md readme:README.md; do
    diff "$dir/codes.c" "$dir/codes.${place%%:*}" >"$dir/diff" || true
    expect "${place#*:}'s error table is the C code's (status, error) pairs (< C only, > doc only)" \
        "" "$(grep '^[<>]' "$dir/diff" | tr '\n' ' ')"
done
diff "$dir/names.c" "$dir/names.openapi" >"$dir/diff" || true
expect "openapi.yaml's Error enum is the C code's error names (< C only, > enum only)" "" \
    "$(grep '^[<>]' "$dir/diff" | tr '\n' ' ')"
expect "every status the C code answers has its own label on /metrics (not 'other')" "" \
    "$(comm -23 "$dir/status.c" "$dir/status.metrics" | tr '\n' ' ')"

# --- the man page's ROUTES against the route table (a path's {name} is the table's *)
sed -n 's/^ *{"\([A-Z]*\)", "\(\/[^"]*\)".*/\1 \2/p' "$ROOT/service/routes.c" | sort >"$dir/routes.c"
groff -man -Tascii -P-cbou "$ROOT/docs/seckill.8" 2>/dev/null >"$dir/page.txt"
sed -n '/^ROUTES/,/^[A-Z]/p' "$dir/page.txt" | sed -n 's/^ \{7\}\([A-Z]\{3,6\} \/[^ ]*\)$/\1/p' |
    sed 's/{[^}]*}/*/g' | sort >"$dir/routes.man"
check "the route table has routes ($(wc -l <"$dir/routes.c"))" test "$(wc -l <"$dir/routes.c")" -ge 10
diff "$dir/routes.c" "$dir/routes.man" >"$dir/diff" || true
expect "seckill(8)'s ROUTES are the route table (< table only, > page only)" "" \
    "$(grep '^[<>]' "$dir/diff" | tr '\n' ' ')"

# --- number flags: the range the binary enforces, in --help, operations.md, seckill(8)
"$bin" --help >"$dir/help"
mapfile -t numeric < <(sed -n 's/^  --\([a-z0-9-]*\) [NK] .*/\1/p' "$dir/help")
check "--help has number flags (${#numeric[@]})" test "${#numeric[@]}" -ge 10
for f in "${numeric[@]}"; do
    range=$("$bin" "--$f" x 2>&1 >/dev/null | grep -o '[0-9]*\.\.[0-9]*' | head -1)
    if [[ -z $range ]]; then
        check "--$f x is refused with the range it takes" false
        continue
    fi
    miss=()
    grep -q "^  --$f .*($range" "$dir/help" || grep -q "^  --$f .*[ (]$range[),;]" "$dir/help" ||
        miss+=(--help)
    grep -q "^| \`--$f .*$range" "$ROOT/docs/operations.md" || miss+=(operations.md)
    awk -v f="--$f" '$1 == f { on = 1; next } on && /^ {7}--/ { on = 0 } on' "$dir/page.txt" |
        tr -s ' \n' ' ' | grep -q -- "$range" || miss+=(seckill.8)
    expect "--$f takes $range, and says so everywhere" "" "${miss[*]}"
done

# --- the README's demo table: every lock mode, figures that agree, a date and a commit
modes=$(sed -n 's/^  --lock MODE .* \(none, .*\) (default.*/\1/p' "$dir/help" | tr -d ',' |
    sed 's/ or / /' | tr ' ' '\n' | sort | tr '\n' ' ')
awk '/^## What the demo shows/ { on = 1 } on && /^```$/ { n++; next } on && n == 1' \
    "$ROOT/README.md" >"$dir/demo.txt"
table_modes=$(awk 'NR > 2 { print $1 }' "$dir/demo.txt" | sort | tr '\n' ' ')
expect "the README's demo table has a row for every lock mode of --help" "$modes" "$table_modes"
# columns: mode inst K req/s p50 p99 sell_s placed stock oversold ... result (last)
bad=$(awk 'NR > 2 { over = $8 - $9; if (over < 0) over = 0
        if ($10 != over || (($10 > 0) != ($NF == "OVERSOLD"))) print $1 }' "$dir/demo.txt")
expect "each row's oversold is placed - stock, and its verdict says so" "" "$bad"
intro=$(awk '/^## What the demo shows/ { on = 1 } on && /^```$/ { exit } on' "$ROOT/README.md" |
    tr '\n' ' ')
date=$(grep -oE 'on 20[0-9]{2}-[0-9]{2}-[0-9]{2}' <<<"$intro" | head -1)
commit=$(grep -oE 'commit [0-9a-f]{7,40}' <<<"$intro" | head -1 | cut -d' ' -f2)
check "the demo table's run has a date (${date:-none})" test -n "$date"
check "... and a commit of this repository (${commit:-none})" \
    git -C "$ROOT" cat-file -e "${commit:-none}^{commit}"

checks_summary
