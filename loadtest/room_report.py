#!/usr/bin/env python3
"""room_report.py: the waiting room demo's figures (loadtest/room.sh runs it), from the
buyers' lines (loadtest/roomclient.c), the room's queue and news read from Redis, the
SKU and its audit, and INFO commandstats before and after a quiet window and the sale.
Prints the report, writes --out (JSON). With --check KNOW_MS: exit 1 when a check
fails (loadtest/room.sh says which); else 0."""
import argparse
import base64
import bisect
import json
import os
import sys

COLS = ("i join_sent join_answered position admitted order_sent order_answered "
        "order_status end soldout_answered soldout_sent last_wait_sent polls errors "
        "queued_max ticket soldout_held").split()
PRE_MAX = 10**15  # room_join.lua: a pre-queue place is a draw below 10^15


def buyers_of(path):
    rows = []
    with open(path) as f:
        for line in f:
            v = line.rstrip("\n").split("\t")
            r = dict(zip(COLS, v))
            r.setdefault("soldout_held", "0")  # a client before the column
            for k in COLS:
                if k not in ("end", "ticket"):
                    r[k] = int(r[k])
            rows.append(r)
    return rows


def pairs(flat_or_nested):
    """redis-cli --json's answer for ZRANGE WITHSCORES or a field list, as pairs."""
    x = flat_or_nested
    if x and isinstance(x[0], list):
        return [tuple(p) for p in x]
    return list(zip(x[0::2], x[1::2]))


def news_of(path):
    raw = json.load(open(path))
    items = raw.items() if isinstance(raw, dict) else raw
    out = []
    for entry in items:
        _, fields = entry
        if isinstance(fields, dict):
            f = fields
        else:
            f = dict(pairs(fields))
        out.append({"at": int(f["at"]), "n": int(f["n"]), "s": f.get("s"),
                    "l": int(f.get("l", 0))})
    return sorted(out, key=lambda e: e["at"])


def stats_of(path):
    d = {}
    for line in open(path):
        name, calls = line.split()
        d[name] = int(calls)
    return d


def monitor_of(path, q0, q1, s0, s1):
    """(window, what) of each command sent to Redis in the quiet window or the sale, from
    MONITOR's lines ('TIME [DB ADDR] "cmd" "arg"...'; ADDR lua: run by a script); a
    script named by the keys it was given."""
    with open(path, errors="replace") as f:
        for line in f:
            head, _, rest = line.partition("] ")
            if not rest or head.endswith(" lua"):
                continue
            ms = float(head.split(" ", 1)[0]) * 1000
            kind = "quiet" if q0 <= ms < q1 else "sale" if s0 <= ms < s1 else None
            if not kind:
                continue
            cmd = rest.split('"', 2)[1].lower()
            if cmd in ("evalsha", "eval"):
                if ":room:rank" in rest and ":room:news" not in rest:
                    cmd = "script room_join"
                elif ":room:news" in rest:
                    cmd = "script room_pace"
                elif "{rooms}" in rest:
                    cmd = "script room_lease"
                else:
                    cmd = "script other (orders, leases)"
            yield kind, cmd


def delta(a, b):
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) != a.get(k, 0)}


def ranks(values):
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0] * len(values)
    for rank, i in enumerate(order):
        r[i] = rank
    return r


def spearman(x, y):
    n = len(x)
    if n < 3:
        return None
    rx, ry = ranks(x), ranks(y)
    d2 = sum((a - b) ** 2 for a, b in zip(rx, ry))
    return 1 - 6 * d2 / (n * (n * n - 1))


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def main():
    ap = argparse.ArgumentParser()
    for a in ("buyers", "news", "sku", "audit", "stats", "out"):
        ap.add_argument("--" + a, required=True)
    ap.add_argument("--monitor", required=True)
    ap.add_argument("--windows", required=True, help="q0,q1,s0,s1: Redis ms")
    for a in ("starts", "rate", "stock", "instances", "spread-ms"):
        ap.add_argument("--" + a, type=int, required=True)
    ap.add_argument("--check", type=int, default=0)
    ap.add_argument("--cpu", default="", help="instances and nginx CPU s: i0,i1,l0,l1")
    ap.add_argument("--polls", default="", help="the client's polls a second")
    ap.add_argument("--killed", default="", help="'I MS': instance I killed at Redis ms")
    o = ap.parse_args()

    b = buyers_of(o.buyers)
    n = len(b)
    sku = json.load(open(o.sku))
    try:
        audit = json.load(open(o.audit))
    except ValueError:
        audit = {}
    ends = {}
    for r in b:
        ends[r["end"]] = ends.get(r["end"], 0) + 1
    bought = ends.get("bought", 0)
    oversold = max(0, bought - o.stock)
    polls = sum(r["polls"] for r in b)
    errors = sum(r["errors"] for r in b)

    # Redis commands: those sent (a round trip each) by what they were, from MONITOR, and
    # every call (those scripts ran inside too) from INFO commandstats; the sale's, less
    # the background, the instances' own duties in the quiet window scaled to the sale
    q0, q1, s0, s1 = (int(x) for x in o.windows.split(","))
    scale = (s1 - s0) / (q1 - q0)
    sent = {"quiet": {}, "sale": {}}
    for kind, cnt in monitor_of(o.monitor, q0, q1, s0, s1):
        sent[kind][cnt] = sent[kind].get(cnt, 0) + 1
    sent_by = {k: {"sale": v, "background": round(sent["quiet"].get(k, 0) * scale)}
               for k, v in sorted(sent["sale"].items(), key=lambda kv: -kv[1])}
    sent_total = sum(sent["sale"].values()) - sum(sent["quiet"].values()) * scale
    st = {k: stats_of(os.path.join(o.stats, k + ".txt"))
          for k in ("quiet0", "quiet1", "sale0", "sale1")}
    quiet, sale = delta(st["quiet0"], st["quiet1"]), delta(st["sale0"], st["sale1"])
    background = sum(quiet.values()) * scale
    sale_total = sum(sale.values())
    per_buyer = (sale_total - background) / n
    joins = sent["sale"].get("script room_join", 0)

    # admissions: the pacer's news, on Redis's clock
    news = news_of(o.news)
    admits = []  # (at, admitted in that tick)
    prev = None
    for e in news:
        if prev is not None and e["n"] > prev:
            admits.append((e["at"], e["n"] - prev))
        prev = e["n"] if prev is None else max(prev, e["n"])
    admitted_total = news[-1]["n"] if news else 0
    over_rate, worst = 0, 0.0
    for i in range(len(news)):
        for j in range(i + 1, len(news)):
            got = news[j]["n"] - news[i]["n"]
            allowed = o.rate * (news[j]["at"] - news[i]["at"]) / 1000 + o.rate + 1
            worst = max(worst, got - allowed + o.rate + 1)
            if got > allowed:
                over_rate += 1
    windows, rate_measured = [], None
    if admits:
        a0, a1 = admits[0][0], admits[-1][0]
        if a1 > a0:  # the first tick's admissions are the banked second's burst
            rate_measured = (admitted_total - admits[0][1]) * 1000 / (a1 - a0)
        w = {}
        for at, k in admits:
            w[(at - a0) // 1000] = w.get((at - a0) // 1000, 0) + k
        windows = [w.get(s, 0) for s in range(max(w) + 1)]
    live_max = max((e["l"] for e in news), default=0)
    # admissions per 10 s window from the first tick on, that tick's (the banked
    # second's burst at the start) left out; whole windows only
    windows10 = []
    if admits:
        a0 = admits[0][0]
        last = admits[-1][0]
        k = 0
        while a0 + (k + 1) * 10000 <= last:
            lo, hi = a0 + k * 10000, a0 + (k + 1) * 10000
            windows10.append(sum(c for at, c in admits[1:] if lo <= at < hi))
            k += 1
    killed = None
    if o.killed:
        ki, kms = (int(x) for x in o.killed.split())
        # the gap: the last admission before the kill to the first after it
        before = [at for at, _ in admits if at <= kms]
        after = [(at, c) for at, c in admits if at > kms]
        killed = {"instance": ki, "after_start_ms": kms - o.starts,
                  "gap_ms": after[0][0] - before[-1] if before and after else None,
                  "first_batch_after": after[0][1] if after else None,
                  "window": (kms - admits[0][0]) // 10000 if admits else None}
    polls_s = {}
    if o.polls and os.path.exists(o.polls):
        for line in open(o.polls):
            sec, k = line.split()
            polls_s[int(sec)] = int(k)
    cpu = None
    if o.cpu:
        i0, i1, l0, l1 = (float(x) for x in o.cpu.split(","))
        cpu = {"instances_s": round(i1 - i0, 2), "nginx_s": round(l1 - l0, 2)}

    # fairness: the places (the order the pacer admits in; each ticket's, which the
    # queue in Redis no longer holds for the buyers it skipped once they stopped
    # polling, after sold_out) against arrival
    rows = [r for r in b if r["ticket"] != "-"]
    for r in rows:
        text = base64.urlsafe_b64decode(r["ticket"] + "=" * (-len(r["ticket"]) % 4))
        r["place"] = int(text.decode().split("|")[2])
    pre = [r for r in rows if r["place"] < PRE_MAX]
    post = [r for r in rows if r["place"] >= PRE_MAX]
    rho = spearman([(r["join_sent"], r["i"]) for r in pre], [r["place"] for r in pre])
    seen, late_pairs, any_pairs = [], 0, 0
    for r in sorted(post, key=lambda r: r["place"]):
        # earlier places whose buyer arrived later: by more than 100 ms, and at all
        late_pairs += len(seen) - bisect.bisect_right(seen, r["join_sent"] + 100)
        any_pairs += len(seen) - bisect.bisect_right(seen, r["join_sent"])
        bisect.insort(seen, r["join_sent"])
    npost_pairs = len(post) * (len(post) - 1) // 2
    got_in = {r["i"] for r in b if r["admitted"]}
    first = {r["i"] for r in sorted(rows, key=lambda r: r["place"])[:len(got_in)]}
    admitted_out_of_place = len(got_in - first)

    joined = [r for r in b if r["join_answered"]]
    join_span = (max(r["join_answered"] for r in joined) - min(r["join_sent"] for r in joined)
                 if joined else 0)
    join_lat = [r["join_answered"] - r["join_sent"] for r in joined]

    # the truth about the stock: the last unit sold, then each waiting buyer's sold_out
    sold_at = [r["order_answered"] for r in b if r["end"] == "bought"]
    last_sale = max(sold_at) if sold_at else 0
    # waiting then: joined (answered) before it; a buyer whose join came later (the
    # client's join queue on a busy machine) was not waiting, and its join says sold_out
    know = [r["soldout_answered"] - last_sale for r in b
            if r["end"] == "sold_out" and 0 < r["join_answered"] <= last_sale]
    # the same less what the client held that poll for a connection: what a browser,
    # which has its own, would see
    know_net = [r["soldout_answered"] - r["soldout_held"] - last_sale for r in b
                if r["end"] == "sold_out" and 0 < r["join_answered"] <= last_sale]
    joined_after = sum(1 for r in b if r["end"] == "sold_out" and r["join_answered"] > last_sale)
    stale = max((r["last_wait_sent"] - last_sale for r in b), default=0) if last_sale else None

    rep = {
        "buyers": n, "stock": o.stock, "rate_per_s": o.rate, "instances": o.instances,
        "spread_ms": o.spread_ms, "ends": ends,
        "joined_before_start": len(pre), "joined_after_start": len(post),
        "bought": bought, "oversold": oversold,
        "sku_remaining": sku.get("remaining"), "sku_sold": sku.get("sold"),
        "audit_consistent": audit.get("consistent"),
        "joins_per_s": round(len(joined) * 1000 / join_span) if join_span else None,
        "join_ms_p50": pct(join_lat, 50), "join_ms_p99": pct(join_lat, 99),
        "client_queue_ms_p99": pct([r["queued_max"] for r in b], 99),
        "client_queue_ms_max": max(r["queued_max"] for r in b),
        "polls": polls, "polls_per_buyer": round(polls / n, 2), "errors": errors,
        "sale_ms": s1 - s0, "polls_per_s_max": max(polls_s.values(), default=None),
        "polls_per_s": [polls_s.get(k, 0) for k in range(max(polls_s, default=-1) + 1)],
        "cpu": cpu,
        "redis": {"sent_per_buyer": round(sent_total / n, 3),
                  "joins_per_buyer": round(joins / n, 3), "sent": sent_by,
                  "calls_per_buyer": round(per_buyer, 3), "calls_in_sale": sale_total,
                  "calls_background": round(background)},
        "admission": {"admitted": admitted_total, "rate_measured": rate_measured
                      and round(rate_measured, 2), "per_second": windows,
                      "windows_over_rate": over_rate, "live_passes_max": live_max,
                      "per_10s": windows10, "killed": killed},
        "fairness": {"prequeue_spearman_rho": rho and round(rho, 4),
                     "post_pairs": npost_pairs, "post_pairs_late_over_100ms": late_pairs,
                     "post_pairs_out_of_order": any_pairs,
                     "admitted_not_first_places": admitted_out_of_place},
        "soldout": {"waiting_at_last_sale": len(know), "joined_after_last_sale": joined_after,
                    "know_ms_p50": pct(know, 50), "know_ms_p99": pct(know, 99),
                    "know_ms_max": max(know) if know else None,
                    "know_ms_p99_less_client_hold": pct(know_net, 99),
                    "last_waiting_poll_sent_after_ms": stale},
    }
    json.dump(rep, open(o.out, "w"), indent=1)

    a, f, s = rep["admission"], rep["fairness"], rep["soldout"]
    frac = lambda k, m: "%.4f%%" % (100 * k / m) if m else "-"
    print("waiting room: %d buyers (%d before starts_at, %d after) over %d ms for %d units "
          "at %d/s, %d instances via nginx" % (n, len(pre), len(post), o.spread_ms,
                                               o.stock, o.rate, o.instances))
    print("  ends           %s; client errors (asked again) %d" % (
        " ".join("%s %d" % kv for kv in sorted(ends.items())), errors))
    print("  joins          %s a second (the first sent to the last answered), p50 %s ms, "
          "p99 %s ms each" % (rep["joins_per_s"], rep["join_ms_p50"], rep["join_ms_p99"]))
    print("  client         a poll or order waited for one of the client's connections %s ms "
          "at most (p99 of the buyers' longest %s ms): this much of the times below is "
          "the client's" % (rep["client_queue_ms_max"], rep["client_queue_ms_p99"]))
    print("  oversold       %d (bought %d, SKU sold %s remaining %s, audit consistent %s)" % (
        oversold, bought, rep["sku_sold"], rep["sku_remaining"], rep["audit_consistent"]))
    print("  redis          %.3f commands sent per buyer, of them %.3f joins (room_join.lua), "
          "the instances' own duties taken out; %.1f calls per buyer with those inside "
          "scripts; %d polls, %.2f a buyer" % (sent_total / n, joins / n, per_buyer, polls,
                                                polls / n))
    print("                 sent in the sale: %s" % ", ".join(
        "%s %d (background %d)" % (k, v["sale"], v["background"]) for k, v in sent_by.items()))
    print("  admitted       %d; %s a second after the first tick (rate %d); per second %s; "
          "windows over rate + burst: %d; live passes at most %d" % (
              admitted_total, a["rate_measured"], o.rate, windows, over_rate, live_max))
    if windows10:
        print("  per 10 s       %s admitted (the start's burst left out; rate x 10 = %d): %s" % (
            windows10, 10 * o.rate, " ".join("%+.1f%%" % (100 * (w - 10 * o.rate) / (10 * o.rate))
                                             for w in windows10)))
    if killed:
        print("  pacer killed   instance %d at %d ms after starts_at (in 10 s window %s): no "
              "admission for %s ms around it, then %s at once" % (
                  killed["instance"], killed["after_start_ms"], killed["window"],
                  killed["gap_ms"], killed["first_batch_after"]))
    print("  polls          %s a second at most (client); %s" % (
        rep["polls_per_s_max"], "instances' CPU %.2f s, nginx's %.2f s over the sale's %d ms" % (
            cpu["instances_s"], cpu["nginx_s"], s1 - s0) if cpu else "CPU not measured"))
    print("  fairness       pre-queue rho(arrival, place) %s over %d; after the start %s of "
          "%d pairs out of arrival order by > 100 ms (%s at all); admitted not the first "
          "places: %d" % (f["prequeue_spearman_rho"], len(pre), frac(late_pairs, npost_pairs),
                          npost_pairs, frac(any_pairs, npost_pairs), admitted_out_of_place))
    print("  sold out known %d waiting buyers told sold_out p50 %s ms, p99 %s ms, max %s ms "
          "after the last unit sold (p99 %s ms less the time the client held that poll for a "
          "connection; %d more joined after it: their join said so); the last poll still "
          "answered waiting was sent %s ms after it" % (
              len(know), s["know_ms_p50"], s["know_ms_p99"], s["know_ms_max"],
              s["know_ms_p99_less_client_hold"], joined_after, stale))

    if not o.check:
        return 0
    fails = []
    if oversold:
        fails.append("oversold %d" % oversold)
    if bought != o.stock or sku.get("remaining") != 0:
        fails.append("bought %d of %d, remaining %s" % (bought, o.stock, sku.get("remaining")))
    if ends.get("unfinished", 0) or ends.get("refused", 0) or ends.get("expired", 0):
        fails.append("buyers unfinished, refused or expired: %s" % ends)
    if over_rate:
        fails.append("%d windows of the news admitted over rate x length + rate + 1" % over_rate)
    if admitted_out_of_place:
        fails.append("%d admitted buyers not among the first places" % admitted_out_of_place)
    if joins != n:
        fails.append("%d joins sent to Redis for %d buyers (one each)" % (joins, n))
    if sent_total / n > 2:
        fails.append("%.2f commands sent per buyer (2 at most)" % (sent_total / n))
    if know and max(know) > o.check:
        fails.append("a waiting buyer told sold_out %d ms after the last sale (> %d)" %
                     (max(know), o.check))
    for msg in fails:
        print("CHECK FAILED: " + msg)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
