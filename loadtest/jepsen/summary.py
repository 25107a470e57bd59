#!/usr/bin/env python3
"""summary.py: the table of a loadtest/jepsen.sh result directory.

    summary.py OUT

One row per run (OUT/ROW-REP/ with run.json and check.json): the row, its seed, the
faults injected by kind, the operations (ok/fail/info), and the violations by kind,
then the totals per row. Writes OUT/summary.json too. Runs without a check.json (a
run that never got to its checker) are listed as such.
"""
import collections
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = argv[1]
    rows = []
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        run = load(os.path.join(d, "run.json"))
        if not os.path.isdir(d) or run is None:
            continue
        check = load(os.path.join(d, "check.json"))
        faults = collections.Counter(f["kind"] for f in run.get("faults", []))
        rows.append({"run": name, "mode": run["mode"], "seed": run["seed"],
                     "faults": dict(faults), "ops": (check or {}).get("ops"),
                     "violations": (check or {}).get("violations"),
                     "valid": (check or {}).get("valid")})
    print(f"{'run':<16} {'seed':>10} {'faults':>6} {'ok':>7} {'fail':>7} {'info':>6}  violations")
    for r in rows:
        ops = r["ops"] or {}
        found = {k: v for k, v in (r["violations"] or {}).items() if v}
        what = ", ".join(f"{k} {v}" for k, v in sorted(found.items())) or "none"
        if r["violations"] is None:
            what = "no check (the run did not finish)"
        print(f"{r['run']:<16} {r['seed']:>10} {sum(r['faults'].values()):>6} "
              f"{ops.get('ok', '-'):>7} {ops.get('fail', '-'):>7} {ops.get('info', '-'):>6}  {what}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
