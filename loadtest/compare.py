#!/usr/bin/env python3
"""compare.py DIR: the report of loadtest/compare.sh.

Reads DIR/meta.json (what compare.sh ran) and DIR/round-I/{base,head}/bench.json;
prints, per scenario and system, each figure's median and min-max over the rounds for
BASE and HEAD and the ratio HEAD/BASE of the medians, and writes DIR/compare.json.
Exit status 1 when a round's step failed (its figures are left out of the statistics).
"""
import glob
import json
import os
import statistics
import sys

SCENARIOS = ["s1-c256", "s1-c64", "s2", "cont"]
SYSTEMS = ["none", "local", "setnx", "redis", "redlock", "zk", "pg", "atomic",
           "redis-pay", "redis-sink", "redis-full", "redis-buyer", "canned"]
# (key in compare.json, field of a bench.json row, label, decimals); CPU first: it
# varies far less from round to round than req/s on a shared machine. In S2 nothing
# is placed, and Redis's CPU and commands are per answer there, as in bench.sh's table.
# Redis's commands per order (commandstats) hardly move between rounds: a change in
# what the scripts do shows there first.
METRICS = [("redis_cpu_us_per_order", "redis_cpu_us_per_order", "redis_us/order", 1),
           ("redis_orders_per_core_s", "redis_orders_per_core_s", "ord/s/core", 0),
           ("redis_calls_per_order", "redis_calls_per_order", "redis_cmds/order", 2),
           ("seckill_cpu_us_per_request", "seckill_cpu_us_per_request", "seckill_us/req", 1),
           ("machine_cpu_us_per_request", "machine_cpu_us_per_request", "machine_us/req", 1),
           ("req_per_s", "req_per_s", "req/s", 0)]
S2 = {"redis_cpu_us_per_order": ("redis_cpu_us_per_request", "redis_cpu_us_per_request",
                                  "redis_us/answer", 1),
      "redis_calls_per_order": ("redis_calls_per_request", "redis_calls_per_request",
                                "redis_cmds/answer", 2)}


def order(key):
    scenario, system = key
    mode = system[:-3] if system.endswith("-b1") else system
    rank = SYSTEMS.index(mode) if mode in SYSTEMS else len(SYSTEMS)
    sc = SCENARIOS.index(scenario) if scenario in SCENARIOS else len(SCENARIOS)
    return (sc, rank, system)


def summary(values):
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": min(values),
            "max": max(values), "n": len(values), "values": values}


def fmt(s, dec):
    if s is None:
        return "-"
    return f"{s['median']:.{dec}f} ({s['min']:.{dec}f}-{s['max']:.{dec}f})"


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "meta.json")) as f:
        meta = json.load(f)
    rounds = meta["rounds"]
    # rows[(scenario, system)][side] = [row of round 1, row of round 2, ...]
    rows, errors = {}, []
    for i in range(1, rounds + 1):
        for side in ("base", "head"):
            path = os.path.join(out, f"round-{i}", side, "bench.json")
            if not os.path.exists(path):
                errors.append(f"round {i} {side}: no bench.json")
                continue
            with open(path) as f:
                bench = json.load(f)
            for r in bench.get("results", []):
                key = (r["scenario"], r["system"])
                rows.setdefault(key, {"base": [], "head": []})
                if r.get("error") or r.get("req_per_s") is None:
                    errors.append(f"round {i} {side}: {key[0]} {key[1]}: {r.get('error')}")
                    continue
                rows[key][side].append(r)

    results = []
    for key in sorted(rows, key=order):
        scenario, system = key
        metrics = {}
        for name, field, label, dec in METRICS:
            if scenario == "s2" and name in S2:
                name, field, label, dec = S2[name]
            sides = {}
            for side in ("base", "head"):
                vals = [r[field] for r in rows[key][side] if r.get(field) is not None]
                sides[side] = summary(vals)
            b, h = sides["base"], sides["head"]
            ratio = apart = None
            if b and h and b["median"] > 0:
                ratio = round(h["median"] / b["median"], 3)
                # with fewer than 3 rounds a side, equal builds are apart too often
                # (1 in 3 with 2) for the mark to mean anything
                if b["n"] >= 3 and h["n"] >= 3:
                    apart = h["min"] > b["max"] or h["max"] < b["min"]
            metrics[name] = {"label": label, "decimals": dec, "base": b, "head": h,
                             "ratio": ratio, "apart": apart}
        results.append({"scenario": scenario, "system": system,
                        "batch": (rows[key]["head"] or rows[key]["base"] or [{}])[0].get("batch"),
                        "metrics": metrics})

    doc = dict(meta)
    doc["errors"] = errors
    doc["results"] = results
    with open(os.path.join(out, "compare.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    base, head = meta["base"], meta["head"]
    quick = " QUICK run (1 s steps): a smoke test, not numbers;" if meta.get("quick") else ""
    print(f"seckill bench compare:{quick} {rounds} alternating rounds (BASE first in odd ones, HEAD in even ones)")
    print(f"  BASE {base['short']} {base['subject'][:70]}")
    print(f"  HEAD {head['short']} {head['subject'][:70]}")
    print(f"  bench.sh {' '.join(meta['bench_args']) or '(defaults)'}")
    print("")
    print(f"{'scenario':<8} {'system':<10} {'figure':<15} {'BASE median (min-max)':>26} "
          f"{'HEAD median (min-max)':>26} {'HEAD/BASE':>10}")
    last = None
    for r in results:
        if last is not None and last != r["scenario"]:
            print("")
        last = r["scenario"]
        for name, m in r["metrics"].items():
            if m["base"] is None and m["head"] is None:
                continue  # canned has no Redis or seckill figures
            ratio = "-" if m["ratio"] is None else f"{m['ratio']:.2f}" + (" *" if m["apart"] else "  ")
            ns = [s["n"] if s else 0 for s in (m["base"], m["head"])]
            short = f"  [rounds: BASE {ns[0]}, HEAD {ns[1]}]" if min(ns) < rounds else ""
            print(f"{r['scenario']:<8} {r['system']:<10} {m['label']:<15} "
                  f"{fmt(m['base'], m['decimals']):>26} {fmt(m['head'], m['decimals']):>26} "
                  f"{ratio:>10}{short}")
    print("")
    print("median (min-max) over the rounds; HEAD/BASE: ratio of the medians, below 1 is")
    print("less CPU or fewer req/s for HEAD; * where HEAD's range and BASE's do not overlap")
    print("(3 rounds or more; two equal builds show it one figure in ten by chance).")
    print("redis_us: Redis CPU per placed order (S2: per answer), data Redis + lock nodes;")
    print("ord/s/core: the orders a second one core of that Redis would take, 10^6 / redis_us;")
    print("redis_cmds: the data Redis's commands per placed order (commandstats, scripts'")
    print("own calls included; S2: per answer);")
    print("seckill_us/req: CPU of the instances per answer. CPU per order varies far less")
    print("than req/s from round to round: read it first.")
    for e in errors:
        print(f"ERROR: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
