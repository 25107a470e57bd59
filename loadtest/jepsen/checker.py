#!/usr/bin/env python3
"""checker.py RUN_DIR: a Jepsen-style checker of one recorded seckill run.

Reads the client operations a run recorded against one SKU and the state read back
after the faults healed, and reports each violated invariant by kind (lost, oversell,
stale_sold_out, limit, duplicate_id, idempotency, pay_lost, paid_returned,
paid_after_return, cancel_lost, fence_order; a SKU with a waiting room also room_rate,
room_active, room_order, pass_theft), with a count and up to 5 examples.
Python 3 standard library only.

    checker.py RUN_DIR [--json OUT] [--chart OUT.svg] [--expect-invalid KIND[,KIND]]

    --json OUT        writes {"ops", "violations": {kind: count}, "examples", "valid"}
    --chart OUT.svg   the latency plot (latency_chart.py)
    --expect-invalid  for an unsafe configuration: exit 0 only when one of these kinds
                      was found, else 1 ("checker is blind: ...")
Exit status: 0 valid, 1 a violation, 2 unreadable or malformed input (file and line).
Its tests: python3 -m unittest loadtest/jepsen/test_checker.py (tests/it_checker.sh).

The run directory, as the recorder writes it (every time in ms on one monotonic
clock, shared by history.jsonl and run.json's faults):

  run.json       {"sku": str, "stock": int, "per_user_limit": int,
                  "pay_within_ms": int (0: no payment window, default 0),
                  "staleness_ms": number (default 1000), "mode": str, "seed": int,
                  "faults": [{"kind": str, "target": str, "start": ms, "end": ms}],
                  "room": {"rate_per_s", "max_active", "pass_ttl_ms"} (the SKU's waiting
                  room; null or absent: none)}
  history.jsonl  one JSON object a line; a process (one client loop) does one operation
                 at a time: an "invoke" line, then one completion of that process: "ok",
                 "fail" (definitely did not happen) or "info" (may have happened). An
                 invoke left without a completion at the end counts as info.
                 Every line: "process": int, "type": invoke|ok|fail|info,
                 "f": order|pay|cancel|change|join|poll, "time": ms.
                 order: "key" (the Idempotency-Key, or null), "user", "qty" on the
                   invoke; the completion adds "status" (HTTP status, 0: no answer),
                   "error" (the body's error, or null) and "order_id" (on 201 and on
                   503 outcome_unknown, else null). A retry of an indeterminate order
                   is a new invoke/completion pair with the same key. On a SKU with a
                   room, "pass" on the invoke: the Seckill-Pass it sent.
                 join / poll (the waiting room): "user" on the invoke; the completion
                   adds "status", "error", "ticket" (a join's), "state" and "pass"
                   (a poll's once admitted; null when absent). A ticket's payload
                   (base64url before its first ".") is "t|epoch|place|rank|sku|user",
                   a pass's "p|epoch|expires_ms|sku|user" (inventory/roomtoken.c):
                   the checks read places and admissions (expires_ms less pass_ttl_ms,
                   Redis's clock) from them.
                 pay / cancel: "order_id" (cancel also "user") on the invoke; the
                   completion adds "status" and "error".
                 change: a merchant's change of the stock (PATCH /skus/{sku}): "add"
                   and "withdraw" (units asked, integers >= 0) on the invoke; the
                   completion adds "status", "error" and "withdrawn" (the units the
                   200 says it took, else null). ok: answered 200; fail: refused
                   (a stale writer fenced off, the write side not had); info: no
                   answer. The stock the checks hold the orders to is then the
                   initial one plus what was added less what was withdrawn, bounded
                   at each moment by what the changes' invokes and completions allow
                   (Stock below).
  final.json     {"orders": {order_id: {"state", "user_id", "qty"} or null (404)},
                  "sku": the body of GET /skus/{sku}}; orders names every order_id
                 of the history.
  fences.jsonl   optional: the fencing tokens the store accepted, in that order,
                 {"segment": int, "token": "<n>:<owner>", "<n>@pg" or a decimal
                 integer}.

The recorder types each completion: ok for a 201 (order) or 200 (pay, cancel); fail
for an answer that changed nothing (409, 422, 400/403/404, 503 busy or unavailable);
info for 503 outcome_unknown, 502, 504 and no answer. The checker reads "error":
an order's "sold_out", a pay's or cancel's "expired". It assumes the history holds
every client of the SKU, and that run.json's stock is the SKU's whole stock at the
start (the merchant's changes in the history move it: Stock).
"""
import argparse
import bisect
import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass

KINDS = ("lost", "oversell", "stale_sold_out", "limit", "duplicate_id", "idempotency",
         "pay_lost", "paid_returned", "paid_after_return", "cancel_lost", "fence_order",
         "room_rate", "room_active", "room_order", "pass_theft")
LIVE = ("placed", "pending", "paid")      # states whose units are held
RETURNED = ("cancelled", "expired")       # states whose units came back
EXAMPLES = 5                              # examples shown per kind


class InputError(Exception):
    """Unreadable or malformed input; the message names the file and line."""


@dataclass
class Op:
    """One operation: an invoke and its completion (none: it never completed)."""
    line: int                  # the invoke's line in history.jsonl
    process: int
    f: str                     # order | pay | cancel
    invoke: float
    type: str = "info"         # ok | fail | info, from the completion
    complete: float = None     # None: never completed
    key: str = None
    user: str = None
    qty: int = None
    order_id: str = None
    status: int = None
    error: str = None
    add: int = 0               # change: units asked to add
    withdraw: int = 0          # change: units asked to withdraw
    withdrawn: int = None      # change: units its 200 says it took
    pass_: str = None          # order: the Seckill-Pass sent; poll: the pass answered
    ticket: str = None         # join: the ticket answered
    state: str = None          # join, poll: the room's state answered


# --- reading the run directory

def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v):
    return is_int(v) or (isinstance(v, float) and math.isfinite(v))


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise InputError(f"{path}:{getattr(e, 'lineno', 1)}: not JSON: {e}")


def read_jsonl(path):
    """(line number, object) for each non-blank line of path."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8: {e}")
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}:{n}: not JSON: {e.msg}")
        if not isinstance(obj, dict):
            raise InputError(f"{path}:{n}: not a JSON object")
        yield n, obj


def need(where, obj, name, test, what, default=KeyError):
    """obj[name] when test(value) holds; default when absent and one is given."""
    if name not in obj and default is not KeyError:
        return default
    value = obj.get(name)
    if name not in obj or not test(value):
        raise InputError(f"{where}: \"{name}\" must be {what}, not {json.dumps(value)}")
    return value


def load_config(path):
    c = read_json(path)
    if not isinstance(c, dict):
        raise InputError(f"{path}:1: not a JSON object")
    faults = need(path, c, "faults", lambda v: isinstance(v, list), "a list", [])
    for fault in faults:
        if not isinstance(fault, dict):
            raise InputError(f"{path}: a fault must be an object")
        need(path, fault, "kind", lambda v: isinstance(v, str), "a string")
        need(path, fault, "start", is_number, "a time in ms")
        need(path, fault, "end", is_number, "a time in ms")
    return {
        "sku": need(path, c, "sku", lambda v: isinstance(v, str), "a string"),
        "stock": need(path, c, "stock", lambda v: is_int(v) and v >= 0, "an integer >= 0"),
        "per_user_limit": need(path, c, "per_user_limit", lambda v: is_int(v) and v >= 0,
                               "an integer >= 0"),
        "pay_within_ms": need(path, c, "pay_within_ms", lambda v: is_int(v) and v >= 0,
                              "an integer >= 0", 0),
        "staleness_ms": need(path, c, "staleness_ms", lambda v: is_number(v) and v >= 0,
                             "a number >= 0", 1000),
        "mode": c.get("mode", ""), "seed": c.get("seed", 0), "faults": faults,
        "room": load_room(path, c)}


def load_room(path, c):
    """run.json's "room" ({"rate_per_s", "max_active", "pass_ttl_ms"}), or None."""
    room = c.get("room")
    if room is None:
        return None
    if not isinstance(room, dict):
        raise InputError(f"{path}: \"room\" must be an object or null")
    for name in ("rate_per_s", "max_active", "pass_ttl_ms"):
        need(f"{path}: room", room, name, lambda v: is_int(v) and v > 0, "an integer > 0")
    return room


def load_history(path):
    """The operations of history.jsonl, in invoke order."""
    ops, open_ops = [], {}  # open_ops: process -> its op awaiting a completion
    optional_str = lambda v: v is None or isinstance(v, str)  # noqa: E731
    for n, e in read_jsonl(path):
        where = f"{path}:{n}"
        process = need(where, e, "process", is_int, "an integer")
        kind = need(where, e, "type", lambda v: v in ("invoke", "ok", "fail", "info"),
                    "invoke, ok, fail or info")
        f = need(where, e, "f", lambda v: v in ("order", "pay", "cancel", "change",
                                                "join", "poll"),
                 "order, pay, cancel, change, join or poll")
        time = need(where, e, "time", is_number, "a time in ms")
        if kind == "invoke":
            if process in open_ops:
                raise InputError(f"{where}: process {process} invokes again before its "
                                 f"operation of line {open_ops[process].line} completed")
            op = Op(line=n, process=process, f=f, invoke=time)
            if f == "change":
                op.add, op.withdraw = (need(where, e, name, lambda v: is_int(v) and v >= 0,
                                            "an integer >= 0", 0)
                                       for name in ("add", "withdraw"))
            elif f in ("join", "poll"):
                op.user = need(where, e, "user", lambda v: isinstance(v, str), "a string")
            elif f == "order":
                op.pass_ = need(where, e, "pass", optional_str, "a string or null", None)
                op.key = need(where, e, "key", optional_str, "a string or null", None)
                op.user = need(where, e, "user", lambda v: isinstance(v, str), "a string")
                op.qty = need(where, e, "qty", lambda v: is_int(v) and v > 0,
                              "an integer > 0")
            else:
                op.order_id = need(where, e, "order_id", lambda v: isinstance(v, str),
                                   "a string")
                op.user = need(where, e, "user", optional_str, "a string or null", None)
            open_ops[process] = op
            ops.append(op)
            continue
        op = open_ops.pop(process, None)
        if op is None:
            raise InputError(f"{where}: a completion of process {process}, which has no "
                             f"operation under way")
        if f != op.f:
            raise InputError(f"{where}: completes a {f}, but process {process} "
                             f"invoked a {op.f} on line {op.line}")
        if time < op.invoke:
            raise InputError(f"{where}: completes before its invoke on line {op.line}")
        op.type, op.complete = kind, time
        op.status = need(where, e, "status", lambda v: v is None or is_int(v),
                         "an integer", None)
        op.error = need(where, e, "error", optional_str, "a string or null", None)
        if f == "order":
            op.order_id = need(where, e, "order_id", optional_str, "a string or null",
                               None)
            if kind == "ok" and op.order_id is None:
                raise InputError(f"{where}: an ok order without an order_id")
        if f in ("join", "poll"):
            op.ticket, op.state, op.pass_ = (need(where, e, name, optional_str,
                                                  "a string or null", None)
                                             for name in ("ticket", "state", "pass"))
        if f == "change":
            op.withdrawn = need(where, e, "withdrawn",
                                lambda v: v is None or (is_int(v) and v >= 0),
                                "an integer >= 0 or null", None)
            if kind == "ok" and op.withdraw and op.withdrawn is None:
                raise InputError(f"{where}: an ok withdrawal without \"withdrawn\"")
    return ops


def load_final(path):
    """(orders: {order_id: {"state", "user_id", "qty"} or None}, sku body)."""
    final = read_json(path)
    if not isinstance(final, dict) or not isinstance(final.get("orders"), dict):
        raise InputError(f"{path}:1: must be an object with an \"orders\" object")
    for oid, order in final["orders"].items():
        if order is None:
            continue
        where = f"{path}: order {oid}"
        if not isinstance(order, dict):
            raise InputError(f"{where}: must be an object or null")
        need(where, order, "state", lambda v: v in LIVE + RETURNED, "a known state")
        need(where, order, "qty", is_int, "an integer")
    sku = final.get("sku") if isinstance(final.get("sku"), dict) else {}
    return final["orders"], sku


def token_number(token):
    """The integer a fencing token orders by: n of "<n>:<owner>" (redis) or of "<n>@pg"
    (the pg lock's version), or the token itself (zk's czxid)."""
    text = str(token) if is_int(token) else token
    if not isinstance(text, str):
        return None
    head = text[:-len("@pg")] if text.endswith("@pg") else text.split(":", 1)[0]
    return int(head) if head.isdigit() else None


def load_fences(path):
    """[(line, segment, token, number)] in acceptance order; [] without the file."""
    if not os.path.exists(path):
        return []
    fences = []
    for n, e in read_jsonl(path):
        segment = need(f"{path}:{n}", e, "segment", is_int, "an integer")
        number = token_number(e.get("token"))
        if number is None:
            raise InputError(f"{path}:{n}: \"token\" must be \"<n>:<owner>\", \"<n>@pg\" or "
                             f"a decimal integer, not {json.dumps(e.get('token'))}")
        fences.append((n, segment, e["token"], number))
    return fences


@dataclass
class Run:
    config: dict
    ops: list
    final: dict          # order_id -> {"state", "user_id", "qty"} or None
    sku: dict
    fences: list


def load_run(run_dir):
    def path(name):
        return os.path.join(run_dir, name)
    return Run(load_config(path("run.json")), load_history(path("history.jsonl")),
               *load_final(path("final.json")), load_fences(path("fences.jsonl")))


# --- the history indexed the way the checks look it up

class Index:
    """Tables of ops by key group or order_id; a table has no entry for an id with none
    (read them with .get(oid, []))."""

    def __init__(self, run):
        self.by_key = defaultdict(list)    # key group -> its order ops
        self.acks = defaultdict(list)      # order_id -> ok order ops
        self.pays = defaultdict(list)      # order_id -> ok pays
        self.cancels = defaultdict(list)   # order_id -> ok cancels
        self.cancels_tried = defaultdict(list)  # order_id -> cancels that may have been
        self.expired = defaultdict(list)   # order_id -> pays, cancels answered expired
        self.qty = {}                      # order_id -> qty an order op asked for
        for op in run.ops:
            if op.f == "order":
                self.by_key[key_group(op)].append(op)
                if op.order_id:
                    self.qty.setdefault(op.order_id, op.qty)
                if op.type == "ok":
                    self.acks[op.order_id].append(op)
                continue
            if op.f in ("change", "join", "poll"):  # the stock's (Stock), the room's
                continue
            if op.type == "ok":
                (self.pays if op.f == "pay" else self.cancels)[op.order_id].append(op)
            if op.f == "cancel" and op.type != "fail":
                self.cancels_tried[op.order_id].append(op)
            if op.type == "fail" and op.error == "expired":
                self.expired[op.order_id].append(op)
        for table in ("by_key", "acks", "pays", "cancels", "cancels_tried", "expired"):
            setattr(self, table, dict(getattr(self, table)))

    def returned_at(self, oid):
        """The earliest completion that says oid's units came back (a cancel 200, a 409
        expired: the pay or cancel that finds pay_by passed gives the units back, if no
        sweep did before), or None."""
        answers = self.cancels.get(oid, []) + self.expired.get(oid, [])
        return min((op.complete for op in answers), default=None)


class Stock:
    """The stock the orders are held to, moved by the merchant's changes (f "change"):
    the initial stock plus the units added less the units withdrawn. A change happened
    somewhere between its invoke and its completion, if at all, so at a moment t:
    - at most: the initial stock, every add that did not definitely fail invoked by t,
      less the units each withdrawal answered 200 says it took, once completed by t;
    - at least, anywhere in [t0, t1]: the initial stock, every add answered 200 by t0,
      less every withdrawal that did not definitely fail invoked by t1 (a 200's units,
      else those asked);
    and at the end (at_most(inf)) every add that may have happened, less what the 200s
    withdrew. Without changes both are the initial stock."""

    def __init__(self, run):
        self.initial = run.config["stock"]
        changes = [op for op in run.ops if op.f == "change"]
        self.times = sorted({t for op in changes for t in (op.invoke, op.complete)
                             if t is not None})
        ups = [(op.invoke, op.add) for op in changes if op.type != "fail" and op.add]
        downs = [(op.complete, op.withdrawn) for op in changes
                 if op.type == "ok" and op.withdrawn]
        self._max = self._steps(ups, downs)
        self._min_up = self._sums([(op.complete, op.add) for op in changes
                                   if op.type == "ok" and op.add])
        self._min_down = self._sums([(op.invoke, (op.withdrawn or 0) if op.type == "ok"
                                      else op.withdraw) for op in changes
                                     if op.type != "fail"])

    @staticmethod
    def _sums(moves):
        """([times], [units moved up to and with each time]) of moves (time, units)."""
        times, sums, total = [], [], 0
        for t, u in sorted(moves):
            total += u
            times.append(t)
            sums.append(total)
        return times, sums

    def _steps(self, ups, downs):
        """([times], [stock from each time on]) of the initial stock, ups added and
        downs taken away (each (time, units))."""
        moves = sorted([(t, u) for t, u in ups] + [(t, -u) for t, u in downs])
        times, level, stock = [], [], self.initial
        for t, u in moves:
            stock += u
            if times and times[-1] == t:
                level[-1] = stock
            else:
                times.append(t)
                level.append(stock)
        return times, level

    @staticmethod
    def _at(steps, t):
        times, level = steps
        i = bisect.bisect_right(times, t)
        return level[i - 1] if i else None

    def at_most(self, t=math.inf):
        v = self._at(self._max, t)
        return self.initial if v is None else v

    def at_least(self, t0, t1):
        """The least stock anywhere in [t0, t1]: the adds answered 200 by t0, less the
        withdrawals that may have come by t1."""
        up, down = self._at(self._min_up, t0), self._at(self._min_down, t1)
        return self.initial + (up or 0) - (down or 0)


def key_group(op):
    """Orders one Idempotency-Key stands for: a key is scoped to its user; an order sent
    without a key is a group of its own."""
    return ("key", op.user, op.key) if op.key is not None else ("op", op.line)


def sec(ms):
    return f"{ms / 1000:.3f} s"


def state_of(run, oid):
    order = run.final.get(oid)
    return order["state"] if order else None


def certainly_held(run, ix):
    """(from, until, qty, user, order_id) of each order whose units were certainly held
    over [from, until): acknowledged (from its first ok), matching its final record, and
    until the first invoke of a cancel that may have happened. Orders that ended
    expired, or that a 409 expired names, are left out: their pay_by is on the data
    Redis's clock, so the moment their units came back is not known here; so are
    orders that ended cancelled with no cancel in the history. A lost order (a 201,
    and no record at the end) held its units all the same, as its buyer was told:
    for good without a payment window (a placed order is final), else until its
    invoke + pay_within_ms at least (pay_by is counted from a moment after the invoke;
    a 201 promises the units until then)."""
    held, window = [], run.config["pay_within_ms"]
    for oid, acks in ix.acks.items():
        ack = min(acks, key=lambda op: op.complete)
        order = run.final.get(oid)
        if order is None and not ix.expired.get(oid, []):
            first = min(op.invoke for op in acks)
            until = first + window if window > 0 else math.inf
            cancels = ix.cancels_tried.get(oid, [])
            until = min([until] + [op.invoke for op in cancels])
            if ack.complete < until:
                held.append((ack.complete, until, ack.qty, ack.user, oid))
            continue
        if (not order or order["state"] == "expired" or ix.expired.get(oid, [])
                or order.get("user_id") != ack.user or order["qty"] != ack.qty):
            continue
        cancels = ix.cancels_tried.get(oid, [])
        until = min((op.invoke for op in cancels), default=math.inf)
        if order["state"] == "cancelled" and until == math.inf:
            continue
        if ack.complete < until:
            held.append((ack.complete, until, ack.qty, ack.user, oid))
    return held


def peaks(intervals, cap):
    """Each moment the units of intervals [(from, until, qty, label)] held at once rise
    above cap (once per excursion): [(time, units, labels held)]. cap is a number, or
    a Stock (at each moment its at_most; its changes' times are moments too)."""
    events = sorted([(s, 1, q, label) for s, u, q, label in intervals]
                    + [(u, 0, q, label) for s, u, q, label in intervals if u != math.inf]
                    + [(t, 0, 0, None) for t in getattr(cap, "times", [])])
    held, units, over, out = {}, 0, False, []
    for t, starts, q, label in events:   # at one time, ends (0) before starts (1)
        if label is None:                # a change's moment: the cap may move
            pass
        elif starts:
            held[label] = q
            units += q
        else:
            held.pop(label, None)
            units -= q
        limit = cap.at_most(t) if isinstance(cap, Stock) else cap
        if units > limit and not over:
            out.append((t, units, sorted(held)))
        over = units > limit
    return out


def labels(ids, n=6):
    ids = list(ids)
    return ", ".join(ids[:n]) + (f" (+{len(ids) - n})" if len(ids) > n else "")


# --- the checks: each returns its examples, one per violation

def check_lost(run, ix):
    """Every 201's order exists at the end as it was acknowledged: final.json has it
    (not null), with the user and qty of each 201 that named it. Sound: a 201 is a
    promise."""
    out = []
    for oid, acks in ix.acks.items():
        order = run.final.get(oid)
        if order is None:
            ack = acks[0]
            why = "absent from final.json" if oid not in run.final else "404 at the end"
        else:
            unlike = [op for op in acks
                      if (op.user, op.qty) != (order.get("user_id"), order["qty"])]
            if not unlike:
                continue
            ack = unlike[0]
            why = f"found as user {order.get('user_id')} qty {order['qty']}"
        out.append({"order_id": oid, "key": ack.key, "time_ms": ack.complete,
                    "what": f"order {oid} (key {ack.key}, user {ack.user}, qty {ack.qty}, "
                            f"201 at {sec(ack.complete)}): {why}"})
    return out


def check_oversell(run, ix):
    """Units held never exceed the stock: (a) at the end, units of live orders; (b) over
    the history, units of orders certainly held at once (certainly_held: only what
    201s and the final records prove); (c) units of orders a pay was answered 200;
    (d) at the end, units of live orders and the units the SKU says remain (GET
    /skus/{sku}'s remaining, read after every order): more than the stock means units
    counted twice, sold and still on sale, an oversell to come (a lost update, as a
    stale lock holder's write makes) even when the stock has not run out yet.
    Sound: each sum counts only units that were provably held together (a paid order
    can never give its units back), and units on their way back (an expired order not
    yet swept) are in neither of (d)'s terms, so they can only make it smaller. With
    the merchant's changes in the history the stock is the most they allow (Stock):
    at the end every add that may have happened less the 200s' withdrawals; in (b) at
    each moment."""
    stocks = Stock(run)
    stock, out = stocks.at_most(), []   # at the end: the most the changes allow
    live = [oid for oid, o in run.final.items() if o and o["state"] in LIVE]
    units = units_live = sum(run.final[oid]["qty"] for oid in live)
    if units > stock:
        out.append({"time_ms": None, "what": f"at the end: {units} units in {len(live)} "
                    f"placed/pending/paid orders > stock {stock}"})
    intervals = [(s, u, q, oid) for s, u, q, _, oid in certainly_held(run, ix)]
    for t, units, held in peaks(intervals, stocks):
        out.append({"time_ms": t, "order_ids": held[:20],
                    "what": f"at {sec(t)}: {units} units certainly held > stock "
                            f"{stocks.at_most(t)}: orders {labels(held)}"})
    remaining = run.sku.get("remaining")
    if is_int(remaining) and units_live + remaining > stock:
        out.append({"time_ms": None, "what": f"at the end: {units_live} units in live "
                    f"orders + {remaining} remaining > stock {stock}"})
    paid = [oid for oid in ix.pays if oid in ix.qty or run.final.get(oid)]
    units = sum((run.final.get(oid) or {}).get("qty", ix.qty.get(oid)) for oid in paid)
    if units > stock:
        out.append({"time_ms": None, "order_ids": paid[:20], "what": f"{units} units in "
                    f"{len(paid)} orders with a pay answered 200 > stock {stock}"})
    return out


def check_stale_sold_out(run, ix):
    """A sold_out is wrong when, whatever the undecided operations did, at least qty
    units remained while the server decided it (somewhere between its invoke i and its
    completion c). Units possibly held then are bounded above by every key whose order
    did not definitely fail and was invoked by c, less the orders certainly returned
    by i - staleness_ms:
    - a key holds at most one live order at a time (a retry returns the first id), or
      one per distinct order id of it that exists at the end, if keys were broken;
    - a key with no 201 and no order found at the end still counts, for good: an
      unacknowledged order may have existed and held units for a while and been lost
      in a failover, a 404 at the end says nothing of the middle;
    - an order counts as returned only when it ended cancelled or expired and a cancel
      200 or a 409 expired completed (the change and the return are one script, at or
      before that completion) by i - staleness_ms: the service promises no sold_out
      from staleness_ms after a return. Without a payment window nothing returns.
    The stock then is the least the merchant's changes allow between i and c (Stock:
    the adds answered 200 by i, less every withdrawal that may have come by c).
    So a flagged sold_out was wrong in every serialisation the history allows."""
    stocks, lifecycle = Stock(run), run.config["pay_within_ms"] > 0
    held = []  # (from, returned_at or inf, qty)
    for ops in ix.by_key.values():
        tried = [op for op in ops if op.type != "fail"]
        if not tried:
            continue
        start, qty = min(op.invoke for op in tried), max(op.qty for op in tried)
        found = sorted({op.order_id for op in tried if op.order_id
                        and (run.final.get(op.order_id) or ix.acks.get(op.order_id))})
        for oid in found:
            returned = ix.returned_at(oid) if lifecycle else None
            if returned is None or state_of(run, oid) not in RETURNED:
                returned = math.inf
            order_qty = (run.final.get(oid) or {}).get("qty", qty)
            held.append((start, max(start, returned), max(qty, order_qty)))
        if not found:
            held.append((start, math.inf, qty))
    starts = sorted((s, q) for s, _, q in held)
    start_times = [s for s, _ in starts]
    started = [0]  # started[n]: units of the first n holdings by start
    for _, q in starts:
        started.append(started[-1] + q)
    returns = sorted((r, q) for _, r, q in held if r != math.inf)
    return_times = [r for r, _ in returns]
    gone = [0]
    for _, q in returns:
        gone.append(gone[-1] + q)
    out = []
    for op in run.ops:
        if op.f != "order" or op.type != "fail" or op.error != "sold_out":
            continue
        cutoff = op.invoke - run.config["staleness_ms"]
        possibly = (started[bisect.bisect_right(start_times, op.complete)]
                    - gone[bisect.bisect_left(return_times, cutoff)])
        # the least stock while it was decided: the adds done by its invoke, less
        # every withdrawal that may have come by its completion
        stock = stocks.at_least(op.invoke, op.complete)
        if stock - possibly >= op.qty:
            out.append({"time_ms": op.complete, "key": op.key, "user": op.user,
                        "what": f"sold_out at {sec(op.complete)} (invoked {sec(op.invoke)},"
                                f" key {op.key}, qty {op.qty}) while at most {possibly} of "
                                f"{stock} units could be held"})
    return out


def check_limit(run, ix):
    """No user holds more than per_user_limit units: at the end (live orders by their
    final user_id), and at any moment of the history (orders certainly held). Sound as
    oversell is: only provably held units are summed."""
    limit, out, final_units = run.config["per_user_limit"], [], defaultdict(int)
    for oid, o in run.final.items():
        if o and o["state"] in LIVE:
            final_units[o.get("user_id")] += o["qty"]
    for user, units in sorted(final_units.items(), key=str):
        if units > limit:
            out.append({"user": user, "time_ms": None, "what": f"user {user}: {units} "
                        f"units in live orders at the end > limit {limit}"})
    by_user = defaultdict(list)
    for s, u, q, user, oid in certainly_held(run, ix):
        by_user[user].append((s, u, q, oid))
    for user, intervals in sorted(by_user.items()):
        for t, units, held in peaks(intervals, limit):
            out.append({"user": user, "time_ms": t, "order_ids": held,
                        "what": f"user {user} at {sec(t)}: {units} units certainly held > "
                                f"limit {limit}: orders {labels(held)}"})
    return out


def check_duplicate_id(run, ix):
    """One order id is one order: it is never acknowledged to two keys or users (two
    orders sent without a key are two keys). Sound: each 201 is an order placed."""
    out = []
    for oid, acks in ix.acks.items():
        groups = {key_group(op) for op in acks}
        if len(groups) > 1:
            out.append({"order_id": oid, "time_ms": acks[-1].complete,
                        "what": f"order {oid} acknowledged to " + ", ".join(
                            f"user {op.user} key {op.key} at {sec(op.complete)}"
                            for op in acks)})
    return out


def check_idempotency(run, ix):
    """An Idempotency-Key places at most one order: its 201s all name one id, and of the
    ids the history ties to it (201s and outcome_unknown answers) at most one is live at
    the end. Sound: a retry must return the first order, never place another."""
    out = []
    for group, ops in ix.by_key.items():
        if group[0] != "key":
            continue
        acked = sorted({op.order_id for op in ops if op.type == "ok"})
        live = sorted({op.order_id for op in ops
                       if op.order_id and state_of(run, op.order_id) in LIVE})
        if len(acked) > 1:
            what = f"acknowledged with {len(acked)} ids: {labels(acked)}"
        elif len(live) > 1:
            what = f"{len(live)} live orders at the end: {labels(live)}"
        else:
            continue
        out.append({"key": group[2], "user": group[1], "time_ms": ops[0].invoke,
                    "what": f"key {group[2]} (user {group[1]}): {what}"})
    return out


def check_pay_lost(run, ix):
    """Every pay answered 200 is a paid order at the end: not pending, placed or gone.
    Sound: paid is final and the 200 came after it was made durable."""
    out = []
    for oid, pays in ix.pays.items():
        state = state_of(run, oid)
        if state not in ("paid",) + RETURNED:
            out.append({"order_id": oid, "time_ms": pays[0].complete,
                        "what": f"order {oid}: pay 200 at {sec(pays[0].complete)}, "
                                f"{state or 'absent'} at the end"})
    return out


def check_paid_returned(run, ix):
    """No order is both paid and cancelled or expired: a pay 200 with a final state
    cancelled or expired, or a pay 200 and a cancel 200 for one order. Sound: the
    three are final states, each reached only from pending."""
    out = []
    for oid in sorted(set(ix.pays) | set(ix.cancels)):
        pays, cancels = ix.pays.get(oid, []), ix.cancels.get(oid, [])
        state = state_of(run, oid)
        if pays and cancels:
            what = (f"pay 200 at {sec(pays[0].complete)} and cancel 200 at "
                    f"{sec(cancels[0].complete)}")
        elif pays and state in RETURNED:
            what = f"pay 200 at {sec(pays[0].complete)}, {state} at the end"
        else:
            continue
        out.append({"order_id": oid, "time_ms": pays[0].complete,
                    "what": f"order {oid}: {what}"})
    return out


def check_paid_after_return(run, ix):
    """No pay is answered 200 when it was sent after the order was known returned: a
    cancel 200 or a 409 expired completed before the pay's invoke. Sound: by then the
    order was cancelled or past pay_by, and neither can be paid."""
    out = []
    for oid, pays in ix.pays.items():
        returns = ix.cancels.get(oid, []) + ix.expired.get(oid, [])
        for pay in pays:
            before = [r for r in returns if r.complete < pay.invoke]
            if before:
                r = min(before, key=lambda op: op.complete)
                what = "cancel 200" if r.type == "ok" else f"{r.f} 409 expired"
                out.append({"order_id": oid, "time_ms": pay.invoke,
                            "what": f"order {oid}: pay sent at {sec(pay.invoke)} answered "
                                    f"200 after a {what} at {sec(r.complete)}"})
                break
    return out


def check_cancel_lost(run, ix):
    """Every cancel answered 200 is a cancelled order at the end. Sound: cancelled is
    final, and the 200 came after it was made durable."""
    out = []
    for oid, cancels in ix.cancels.items():
        state = state_of(run, oid)
        if state != "cancelled":
            out.append({"order_id": oid, "time_ms": cancels[0].complete,
                        "what": f"order {oid}: cancel 200 at {sec(cancels[0].complete)}, "
                                f"{state or 'absent'} at the end"})
    return out


def check_fence_order(run, ix):
    """The store accepts a segment's fencing tokens in non-decreasing order: a token
    lower than one accepted before it on that segment is a stale holder's write (equal
    is one holder committing several batches)."""
    out, highest = [], {}  # segment -> (number, token)
    for line, segment, token, number in run.fences:
        if segment in highest and number < highest[segment][0]:
            out.append({"segment": segment, "line": line, "token": token,
                        "what": f"segment {segment}: token {token} (fences.jsonl line "
                                f"{line}) accepted after {highest[segment][1]}"})
        if segment not in highest or number > highest[segment][0]:
            highest[segment] = (number, token)
    return out


# --- the waiting room (run.json's "room"; join and poll in the history)

def token_fields(token, kind):
    """The fields of a ticket ("t": epoch, place, rank, sku, user) or a pass ("p":
    epoch, expires_ms, sku, user): the base64url payload before the first dot, "|"
    separated, its numbers as ints; None when it is not one (inventory/roomtoken.c)."""
    import base64
    if not isinstance(token, str) or "." not in token:
        return None
    head = token.split(".", 1)[0]
    try:
        text = base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    n = 5 if kind == "t" else 4  # fields after the kind; the user may hold "|"
    f = text.split("|", n)
    if len(f) != n + 1 or f[0] != kind or not all(x.lstrip("-").isdigit()
                                                   for x in f[1:n - 1]):
        return None
    return [int(x) for x in f[1:n - 1]] + f[n - 1:]


def admissions(run):
    """{(user, expires_ms)}: the passes the polls were answered, each one admission at
    expires_ms - pass_ttl_ms on Redis's clock (room_pace.lua: a pass's expiry is its
    admission's tick plus pass_ttl_ms)."""
    out = set()
    for op in run.ops:
        if op.f == "poll" and op.type == "ok" and op.pass_:
            p = token_fields(op.pass_, "p")
            if p:
                out.add((p[3], p[1]))
    return out


def check_room_rate(run, ix):
    """Across the instances the room admits at most rate_per_s a second, one second's
    worth banked: in any window [a, b] of admission times, at most rate * (b - a) / 1000
    + rate admissions (room_pace.lua's token bucket, capped at rate tokens; + 1 for the
    rounding of a pacer's fractional tokens). Admission times are Redis's (the pass's
    expiry less pass_ttl_ms), so no client clock enters; passes never seen by a poll are
    not counted, which can only hide a breach. Sound: each pass seen is an admission."""
    room = run.config.get("room")
    if not room:
        return []
    rate, ttl = room["rate_per_s"], room["pass_ttl_ms"]
    times = sorted(e - ttl for _, e in admissions(run))
    out = []
    for j, b in enumerate(times):
        worst = None
        for i in range(j + 1):
            allowed = rate * (b - times[i]) / 1000 + rate + 1
            if j - i + 1 > allowed and (worst is None or j - i + 1 - allowed > worst[0]):
                worst = (j - i + 1 - allowed, i)
        if worst:
            i = worst[1]
            out.append({"time_ms": b, "what": f"{j - i + 1} admissions from {sec(times[i])} "
                        f"to {sec(b)} (Redis time) > {rate}/s x {sec(b - times[i])} + a "
                        f"second's {rate} + 1"})
    return out


def used_from(run):
    """user -> the first invoke of an order of theirs that may have been placed (not
    definitely failed): from then on their pass may count as used."""
    first = {}
    for op in run.ops:
        if op.f == "order" and op.type != "fail":
            first[op.user] = min(first.get(op.user, math.inf), op.invoke)
    return first


def check_room_active(run, ix):
    """At most max_active passes are live at once: admitted, not expired (live over
    [admission, expiry), Redis's clock) and not used. A pass counts as certainly unused
    until its user's first order that may have been placed was invoked (an undecided
    order may have bought: from its invoke the pass is not counted). Checked at each
    admission, where the count can rise. Sound: every pass counted was live there."""
    room = run.config.get("room")
    if not room:
        return []
    most, ttl, used = room["max_active"], room["pass_ttl_ms"], used_from(run)
    passes = sorted((e - ttl, e, user) for user, e in admissions(run))
    out = []
    for t in sorted({a for a, _, _ in passes}):
        live = [user for a, e, user in passes if a <= t < e and used.get(user, math.inf) > t]
        if len(live) > most:
            out.append({"time_ms": t, "what": f"at {sec(t)} (Redis time): {len(live)} live "
                        f"unused passes > max_active {most}: users {labels(sorted(live))}"})
    return out


def check_room_order(run, ix):
    """The room admits in the order of places (the pre-queue's drawn, then arrival):
    no place admitted before a lower one that was admitted later (a place skipped as
    abandoned is never admitted, so both admitted means neither was skipped). Places
    from the users' tickets (join), admission times from their passes."""
    room = run.config.get("room")
    if not room:
        return []
    place = {}
    for op in run.ops:
        if op.f == "join" and op.type == "ok":
            t = token_fields(op.ticket, "t")
            if t:
                place[t[4]] = t[1]
    ttl = room["pass_ttl_ms"]
    got = sorted((place[user], e - ttl, user) for user, e in admissions(run) if user in place)
    out, latest = [], None  # latest: the lower place admitted latest so far
    for p, a, user in got:
        if latest and latest[1] > a:
            out.append({"time_ms": a, "user": user,
                        "what": f"user {user}'s place {p} admitted at {sec(a)}, before "
                                f"user {latest[2]}'s place {latest[0]} admitted at "
                                f"{sec(latest[1])}"})
        if latest is None or a > latest[1]:
            latest = (p, a, user)
    return out


def check_pass_theft(run, ix):
    """A pass serves its own user: no order of a SKU with a room is answered 201 with
    another user's pass, or with none (403 not_admitted is the answer). Sound: the
    history has the pass each order sent."""
    if not run.config.get("room"):
        return []
    out = []
    for op in run.ops:
        if op.f != "order" or op.type != "ok":
            continue
        p = token_fields(op.pass_, "p")
        if p is None or p[3] != op.user:
            whose = f"user {p[3]}'s pass" if p else "no pass"
            out.append({"time_ms": op.complete, "user": op.user, "key": op.key,
                        "what": f"order {op.order_id} of user {op.user} (key {op.key}) "
                                f"answered 201 at {sec(op.complete)} with {whose}"})
    return out


def room_stats(run):
    """What the room rules saw, so that a clean run shows they were not idle:
    admissions, the least slack of any window under room_rate's bound (0: a window
    exactly at it), the most live passes at an admission, orders refused 403."""
    room = run.config.get("room")
    if not room:
        return None
    rate, ttl, most = room["rate_per_s"], room["pass_ttl_ms"], room["max_active"]
    adm = admissions(run)
    times = sorted(e - ttl for _, e in adm)
    slack = min((rate * (b - times[i]) / 1000 + rate - (j - i + 1)
                 for j, b in enumerate(times) for i in range(j + 1)), default=None)
    used, passes = used_from(run), sorted((e - ttl, e, u) for u, e in adm)
    peak = max((sum(1 for a, e, u in passes if a <= t < e and used.get(u, math.inf) > t)
                for t in {a for a, _, _ in passes}), default=0)
    return {"admissions": len(adm), "rate_slack": slack, "peak_live": peak,
            "max_active": most,
            "refused_403": sum(op.f == "order" and op.status == 403 for op in run.ops)}


CHECKS = {"lost": check_lost, "oversell": check_oversell,
          "stale_sold_out": check_stale_sold_out, "limit": check_limit,
          "duplicate_id": check_duplicate_id, "idempotency": check_idempotency,
          "pay_lost": check_pay_lost, "paid_returned": check_paid_returned,
          "paid_after_return": check_paid_after_return, "cancel_lost": check_cancel_lost,
          "fence_order": check_fence_order, "room_rate": check_room_rate,
          "room_active": check_room_active, "room_order": check_room_order,
          "pass_theft": check_pass_theft}
assert tuple(CHECKS) == KINDS


def check(run):
    """{"ops", "violations", "examples", "valid"}: the report of a loaded run."""
    ix = Index(run)
    found = {kind: CHECKS[kind](run, ix) for kind in KINDS}
    ops = {"total": len(run.ops)}
    for t in ("ok", "fail", "info"):
        ops[t] = sum(op.type == t for op in run.ops)
    ops["by_f"] = {f: sum(op.f == f for op in run.ops)
                   for f in ("order", "pay", "cancel", "change", "join", "poll")}
    ops["never_completed"] = sum(op.complete is None for op in run.ops)
    return {"ops": ops, "room": room_stats(run),
            "violations": {k: len(v) for k, v in found.items()},
            "examples": {k: v[:EXAMPLES] for k, v in found.items()},
            "valid": not any(found.values())}


def print_report(report):
    ops, counts = report["ops"], report["violations"]
    print(f"checker: {ops['total']} ops ({ops['ok']} ok, {ops['fail']} fail, "
          f"{ops['info']} info), violations: "
          + ", ".join(f"{k} {counts[k]}" for k in KINDS))
    for kind in KINDS:
        if counts[kind]:
            print(f"{kind} ({counts[kind]}):")
            for example in report["examples"][kind]:
                print(f"  {example['what']}")
    room = report.get("room")
    if room:
        print(f"checker: room: {room['admissions']} admissions, the densest window "
              f"{room['rate_slack']} under room_rate's bound, at most {room['peak_live']} "
              f"of {room['max_active']} passes live, {room['refused_403']} orders refused 403")
    bad = [k for k in KINDS if counts[k]]
    print("checker: valid" if not bad else f"checker: INVALID ({', '.join(bad)})")


def latency_chart():
    """latency_chart.py, beside this file, however this one was loaded."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "latency_chart.py")
    spec = importlib.util.spec_from_file_location("latency_chart", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    p = argparse.ArgumentParser(description="Checks a recorded seckill run (see the "
                                "header of checker.py for the run directory's format).")
    p.add_argument("run_dir")
    p.add_argument("--json", metavar="OUT", help="write the report as JSON to OUT")
    p.add_argument("--chart", metavar="OUT.svg", help="write the latency plot to OUT.svg")
    p.add_argument("--expect-invalid", metavar="KIND[,KIND]",
                   help="exit 0 only when one of these kinds was found")
    args = p.parse_args(argv)
    expected = [k for k in (args.expect_invalid or "").split(",") if k]
    unknown = [k for k in expected if k not in KINDS]
    if unknown:
        print(f"checker: unknown kind {', '.join(unknown)} (kinds: {', '.join(KINDS)})",
              file=sys.stderr)
        return 2
    try:
        run = load_run(args.run_dir)
    except InputError as e:
        print(f"checker: {e}", file=sys.stderr)
        return 2
    report = check(run)
    print_report(report)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    if args.chart:
        latency_chart().write_svg(args.chart, run.ops, run.config)
    if expected:
        hits = [k for k in expected if report["violations"][k]]
        if hits:
            print("checker: found what the configuration is expected to break: "
                  + ", ".join(f"{k} {report['violations'][k]}" for k in hits))
            return 0
        print(f"checker is blind: expected {', '.join(expected)}, found none")
        return 1
    return 0 if report["valid"] else 1


if __name__ == "__main__":
    sys.exit(main())
