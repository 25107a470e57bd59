"""test_checker.py: checker.py against small hand-written runs.

A valid run (retries, sold out, pay, cancel, expiry, units sold again) must pass with
no violation; each violation kind must be caught, and its near misses (what looks
wrong but is allowed) must not be. Malformed input exits 2; --expect-invalid, --json
and --chart as the header of checker.py says. From the repository's root:

    python3 -m unittest loadtest/jepsen/test_checker.py
"""
import base64
import contextlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "checker.py")
_spec = importlib.util.spec_from_file_location("checker", CHECKER)
checker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checker)


class History:
    """Builds history.jsonl: each call is one operation, its invoke and completion."""

    def __init__(self):
        self.events = []

    def _add(self, process, f, start, end, fields, kind, result):
        self.events.append(dict(process=process, type="invoke", f=f, time=start, **fields))
        if kind is not None:
            self.events.append(dict(process=process, type=kind, f=f, time=end, **fields,
                                    **result))
        return self

    def order(self, process, start, end, key, user, kind="ok", order_id=None, status=None,
              error=None, qty=1, pass_=None):
        status = status if status is not None else {"ok": 201, "info": 0}.get(kind, 409)
        fields = dict(key=key, user=user, qty=qty)
        if pass_ is not None:
            fields["pass"] = pass_
        return self._add(process, "order", start, end, fields,
                         kind, dict(status=status, error=error, order_id=order_id))

    def join(self, process, start, end, user, place, kind="ok"):
        """A join of the waiting room answered 202 with a ticket for place."""
        ticket = token(f"t|1|{place}|{place - 1}|tv|{user}")
        return self._add(process, "join", start, end, dict(user=user), kind,
                         dict(status=202, error=None, ticket=ticket, state="waiting",
                              pass_=None))

    def poll(self, process, start, end, user, expires_ms=None):
        """A poll: admitted with a pass expiring at expires_ms (Redis ms), or waiting."""
        got = (dict(state="admitted", pass_=pass_of(user, expires_ms)) if expires_ms
               else dict(state="waiting", pass_=None))
        return self._add(process, "poll", start, end, dict(user=user), "ok",
                         dict(status=200, error=None, ticket=None, **got))

    def pay(self, process, start, end, order_id, kind="ok", status=200, error=None):
        return self._add(process, "pay", start, end, dict(order_id=order_id), kind,
                         dict(status=status, error=error))

    def cancel(self, process, start, end, order_id, user, kind="ok", status=200,
               error=None):
        return self._add(process, "cancel", start, end, dict(order_id=order_id, user=user),
                         kind, dict(status=status, error=error))

    def change(self, process, start, end, add=0, withdraw=0, kind="ok", withdrawn=None,
               status=None, error=None):
        """A merchant's change (PATCH): a 200 takes withdrawn units (default: all
        asked)."""
        status = status if status is not None else {"ok": 200, "info": 0}.get(kind, 503)
        if kind == "ok" and withdraw and withdrawn is None:
            withdrawn = withdraw
        return self._add(process, "change", start, end, dict(add=add, withdraw=withdraw),
                         kind, dict(status=status, error=error,
                                    withdrawn=withdrawn if kind == "ok" else None))

    def lines(self):
        ordered = sorted(enumerate(self.events), key=lambda e: (e[1]["time"], e[0]))
        return [json.dumps({k.rstrip("_"): v for k, v in e.items()}) for _, e in ordered]


def token(payload):
    """A ticket or pass as inventory/roomtoken.c writes one (its kid and mac made up:
    the checker reads the payload only)."""
    body = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
    return f"{body}.0a2fad17.{'m' * 43}"


def pass_of(user, expires_ms):
    return token(f"p|1|{expires_ms}|tv|{user}")


def order(state, user, qty=1):
    return {"state": state, "user_id": user, "qty": qty}


class CheckerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, history, final, stock=1, limit=1, pay_within_ms=0, fences=None,
              remaining=None, **config):
        """The run directory of history (a History, or raw lines) and final orders."""
        run = dict(sku="tv", stock=stock, per_user_limit=limit,
                   pay_within_ms=pay_within_ms, staleness_ms=1000, mode="test", seed=1,
                   faults=[{"kind": "partition", "target": "redis", "start": 50,
                            "end": 150}], **config)
        self.put("run.json", json.dumps(run))
        lines = history.lines() if isinstance(history, History) else history
        self.put("history.jsonl", "\n".join(lines) + "\n")
        sku = {"initial": stock}
        if remaining is not None:
            sku["remaining"] = remaining
        self.put("final.json", json.dumps({"orders": final, "sku": sku}))
        if fences is not None:
            self.put("fences.jsonl", "".join(
                json.dumps({"segment": s, "token": t}) + "\n" for s, t in fences))

    def put(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def run_checker(self, *args):
        """(exit status, stdout, stderr) of checker.main over the run directory."""
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = checker.main([self.dir, *args])
        return status, out.getvalue(), err.getvalue()

    def violations(self, *args):
        report = checker.check(checker.load_run(self.dir))
        return {k: n for k, n in report["violations"].items() if n}

    # --- a valid run

    def valid_run(self):
        """Stock 3 with a payment window: orders, an outcome_unknown and a lost answer
        retried with their keys, sold out, a pay, a cancel and an expiry whose units
        are sold again, sold outs within the staleness of a return."""
        h = History()
        h.order(1, 0, 10, "k1", "u1", order_id="101")
        h.order(2, 5, 20, "k2", "u2", "info", "102", 503, "outcome_unknown")
        h.order(2, 30, 40, "k2", "u2", order_id="102")
        h.order(3, 6, 1006, "k3", "u3", "info")                   # no answer
        h.order(3, 1010, 1020, "k3", "u3", order_id="103")
        h.order(4, 1100, 1105, "k4", "u4", "fail", error="sold_out")
        h.pay(1, 1200, 1210, "101")
        h.pay(1, 1220, 1225, "101")                               # a repeat: 200 again
        h.cancel(2, 1300, 1310, "102", "u2")                      # one unit back
        h.order(4, 1500, 1505, "k5", "u4", "fail", error="sold_out")  # within staleness
        h.order(4, 2400, 2410, "k6", "u4", order_id="104")        # sold again
        h.pay(3, 7000, 7005, "103", "fail", 409, "expired")       # one unit back
        h.cancel(1, 7001, 7006, "101", "u1", "fail", 409, "paid")
        h.order(5, 7100, 7110, "k7", "u5", order_id="105")        # sold again
        h.order(5, 8200, 8210, "k8", "u5", "fail", error="sold_out")
        h.order(6, 8300, 8310, "k9", "u6", "fail", status=503, error="busy")
        h.order(6, 8400, 8410, "k10", "u1", "fail", error="limit_reached")
        final = {"101": order("paid", "u1"), "102": order("cancelled", "u2"),
                 "103": order("expired", "u3"), "104": order("pending", "u4"),
                 "105": order("pending", "u5")}
        fences = [(0, "1:a"), (0, "1:a"), (0, "2:b"), (1, "9:c"), (1, "10:d"),
                  (2, "18446744073709551617"), (2, "18446744073709551618")]
        self.write(h, final, stock=3, limit=1, pay_within_ms=5000, fences=fences)

    def test_valid_run_has_no_violation(self):
        self.valid_run()
        status, out, _ = self.run_checker()
        self.assertEqual(self.violations(), {}, out)
        self.assertEqual(status, 0)
        self.assertIn("checker: 17 ops (8 ok, 7 fail, 2 info)", out)
        self.assertIn("checker: valid", out)

    def test_json_and_chart(self):
        self.valid_run()
        json_out, svg = os.path.join(self.dir, "r.json"), os.path.join(self.dir, "l.svg")
        status, _, _ = self.run_checker("--json", json_out, "--chart", svg)
        self.assertEqual(status, 0)
        with open(json_out) as f:
            report = json.load(f)
        self.assertTrue(report["valid"])
        self.assertEqual(report["ops"]["total"], 17)
        self.assertEqual(set(report["violations"]), set(checker.KINDS))
        root = ET.parse(svg).getroot()
        self.assertEqual(root.tag, "{http://www.w3.org/2000/svg}svg")
        texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
        self.assertIn("partition redis", texts)

    def test_script_exit_status(self):
        self.valid_run()
        done = subprocess.run([sys.executable, CHECKER, self.dir], capture_output=True,
                              text=True)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.put("final.json", json.dumps({"orders": {}}))       # every 201 lost
        done = subprocess.run([sys.executable, CHECKER, self.dir], capture_output=True,
                              text=True)
        self.assertEqual(done.returncode, 1)
        self.assertIn("lost (5):", done.stdout)

    # --- each kind caught, and its near misses let be

    def test_lost(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 0, 10, "k2", "u2", order_id="2").order(3, 0, 10, "k3", "u3", order_id="3")
        h.order(4, 0, 10, "k4", "u4", "info", "4", 503, "outcome_unknown")  # may not exist
        self.write(h, {"1": None, "2": order("placed", "u2", qty=2),
                       "3": order("placed", "u3"), "4": None}, stock=5, limit=2)
        self.assertEqual(self.violations(), {"lost": 2})

    def test_oversell(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u2")})
        # at the end, and from 30 ms on in the history
        self.assertEqual(self.violations(), {"oversell": 2})

    def test_oversell_in_the_middle_only(self):
        """Two units held at once while a cancel was not yet sent: caught from the
        history though the end is fine."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        h.cancel(1, 500, 510, "1", "u1")
        self.write(h, {"1": order("cancelled", "u1"), "2": order("pending", "u2")},
                   pay_within_ms=60000)
        status, out, _ = self.run_checker()
        self.assertEqual(self.violations(), {"oversell": 1})
        self.assertIn("at 0.030 s: 2 units certainly held > stock 1", out)

    def test_oversell_near_miss_cancel_in_flight(self):
        """The second 201 came while the first order's cancel was under way: the
        cancel may have taken effect first."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.cancel(1, 20, 100, "1", "u1")
        h.order(2, 30, 40, "k2", "u2", order_id="2")
        self.write(h, {"1": order("cancelled", "u1"), "2": order("pending", "u2")},
                   pay_within_ms=60000)
        self.assertEqual(self.violations(), {})

    def test_oversell_by_lost_orders(self):
        """A lost 201's unit was sold again: two buyers told yes for one unit. With a
        payment window, only while the first could not yet have expired."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        self.write(h, {"1": None, "2": order("placed", "u2")})
        self.assertEqual(self.violations(), {"lost": 1, "oversell": 1})
        self.write(h, {"1": None, "2": order("pending", "u2")}, pay_within_ms=25)
        self.assertEqual(self.violations(), {"lost": 1})
        self.write(h, {"1": None, "2": order("pending", "u2")}, pay_within_ms=1000)
        self.assertEqual(self.violations(), {"lost": 1, "oversell": 1})

    def test_oversell_to_come(self):
        """A lost update: two orders sold of a stock of 3, and 2 still on sale."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        final = {"1": order("placed", "u1"), "2": order("placed", "u2")}
        self.write(h, final, stock=3, remaining=2)
        status, out, _ = self.run_checker()
        self.assertEqual(self.violations(), {"oversell": 1})
        self.assertIn("2 units in live orders + 2 remaining > stock 3", out)
        self.write(h, final, stock=3, remaining=1)  # as it should be
        self.assertEqual(self.violations(), {})

    def test_oversell_of_paid_orders(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 20, 30, "k2", "u2", "info", "2", 504)
        h.pay(1, 40, 50, "1").pay(2, 40, 50, "2")
        self.write(h, {"1": order("paid", "u1"), "2": order("paid", "u2")},
                   pay_within_ms=60000)
        status, out, _ = self.run_checker()
        self.assertEqual(self.violations(), {"oversell": 2})     # the end, and the pays
        self.assertIn("2 units in 2 orders with a pay answered 200 > stock 1", out)

    # --- the merchant's changes (f "change"): the stock they move

    def test_restock_sells_more(self):
        """Stock 1, a restock of 1 answered 200 before the second order: two units
        held is within the books, at the end and at every moment."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.change(9, 12, 18, add=1)
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u2")},
                   remaining=0)
        self.assertEqual(self.violations(), {})

    def test_restock_that_failed_is_no_stock(self):
        """The same restock refused (a stale writer fenced off: 503): the second order
        oversold, at the end and from its 201 on."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.change(9, 12, 18, add=1, kind="fail", error="busy")
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u2")})
        self.assertEqual(self.violations(), {"oversell": 2})

    def test_restock_without_answer_may_have_happened(self):
        """A restock with no answer (its instance killed mid-change) may have been
        made: no oversell for it; the order before it answered still counts."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.change(9, 12, 18, add=1, kind="info")
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u2")})
        self.assertEqual(self.violations(), {})

    def test_oversell_after_withdrawal(self):
        """Stock 3, 2 units withdrawn (answered 200) while one is sold: a second and
        a third unit sold after the withdrawal completed exceed the books (1) in the
        middle; the end too, with the units the SKU says remain."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.change(9, 20, 30, withdraw=2)
        h.order(2, 40, 50, "k2", "u2", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u2")}, stock=3,
                   remaining=0)
        status, out, _ = self.run_checker()
        self.assertEqual(self.violations(), {"oversell": 3})    # the end twice, the middle
        self.assertIn("at 0.050 s: 2 units certainly held > stock 1", out)
        # withdrawn 1 only (the answer says so): within the books
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.change(9, 20, 30, withdraw=2, withdrawn=1)
        h.order(2, 40, 50, "k2", "u2", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u2")}, stock=3,
                   remaining=0)
        self.assertEqual(self.violations(), {})

    def test_withdrawal_makes_sold_out_right(self):
        """Stock 2, one sold, one withdrawn: a sold_out after the withdrawal was
        invoked is right; one before it, wrong; a sold_out while a restock was under
        way is right (it may not have been made yet), one after its 200, wrong."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 12, 18, "k2", "u2", "fail", error="sold_out")     # wrong: 1 left
        h.change(9, 20, 30, withdraw=1)
        h.order(2, 25, 35, "k3", "u3", "fail", error="sold_out")     # right
        h.change(9, 40, 60, add=1)
        h.order(2, 45, 55, "k4", "u4", "fail", error="sold_out")     # right: under way
        h.order(2, 70, 80, "k5", "u5", "fail", error="sold_out")     # wrong: 1 added
        self.write(h, {"1": order("placed", "u1")}, stock=2)
        self.assertEqual(self.violations(), {"stale_sold_out": 2})

    def test_malformed_change(self):
        for line in ('{"process":9,"type":"invoke","f":"change","time":1,"add":-1}',
                     '{"process":9,"type":"invoke","f":"change","time":1,"withdraw":2}\n'
                     '{"process":9,"type":"ok","f":"change","time":2,"withdraw":2,'
                     '"status":200}'):
            with self.subTest(line=line):
                self.write(line.split("\n"), {})
                self.assertEqual(self.run_checker()[0], 2)

    def test_stale_sold_out(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 20, 30, "k2", "u2", "fail", error="sold_out")
        self.write(h, {"1": order("placed", "u1")}, stock=2)
        self.assertEqual(self.violations(), {"stale_sold_out": 1})

    def test_stale_sold_out_near_miss_indeterminate_orders(self):
        """The last unit may be held by an order whose answer was lost (no id), or by
        one whose id is 404 at the end (it may have existed and been lost)."""
        for final in ({}, {"2": None}):
            with self.subTest(final=final):
                h = History().order(1, 0, 10, "k1", "u1", order_id="1")
                order_id = "2" if final else None
                h.order(2, 5, 15, "k2", "u2", "info", order_id, 503 if final else 0)
                h.order(3, 20, 30, "k3", "u3", "fail", error="sold_out")
                self.write(h, {"1": order("placed", "u1"), **final}, stock=2)
                self.assertEqual(self.violations(), {})

    def test_stale_sold_out_not_for_a_failed_or_later_order(self):
        """A definitely failed order holds nothing; one invoked after the sold out
        answered cannot have held anything then."""
        h = History().order(1, 0, 10, "k1", "u1", "fail", status=503, error="busy")
        h.order(2, 20, 30, "k2", "u2", "fail", error="sold_out")
        h.order(1, 40, 50, "k3", "u3", order_id="3")
        self.write(h, {"3": order("placed", "u3")}, stock=1)
        self.assertEqual(self.violations(), {"stale_sold_out": 1})

    def test_stale_sold_out_after_a_return(self):
        """sold_out 1 s after a cancel 200 is stale; within 1 s of it, or sent before
        that second ended (however late it was answered), it is allowed."""
        cases = [((1400, 1405), 0), ((2000, 2005), 0), ((1900, 4000), 0),
                 ((2300, 2305), 1)]
        for (start, end), flagged in cases:
            with self.subTest(sold_out=(start, end)):
                h = History().order(1, 0, 10, "k1", "u1", order_id="1")
                h.cancel(1, 1000, 1010, "1", "u1")
                h.order(2, start, end, "k2", "u2", "fail", error="sold_out")
                self.write(h, {"1": order("cancelled", "u1")}, pay_within_ms=60000)
                self.assertEqual(self.violations().get("stale_sold_out", 0), flagged)

    def test_stale_sold_out_after_an_expiry(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.pay(1, 6000, 6010, "1", "fail", 409, "expired")
        h.order(2, 7500, 7505, "k2", "u2", "fail", error="sold_out")
        self.write(h, {"1": order("expired", "u1")}, pay_within_ms=5000)
        self.assertEqual(self.violations(), {"stale_sold_out": 1})

    def test_limit(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(1, 20, 30, "k2", "u1", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u1")}, stock=5)
        self.assertEqual(self.violations(), {"limit": 2})   # at the end, and from 30 ms

    def test_limit_near_miss_after_cancel(self):
        """A cancelled order no longer counts toward the limit."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.cancel(1, 20, 30, "1", "u1")
        h.order(1, 40, 50, "k2", "u1", order_id="2")
        self.write(h, {"1": order("cancelled", "u1"), "2": order("pending", "u1")},
                   stock=5, pay_within_ms=60000)
        self.assertEqual(self.violations(), {})

    def test_duplicate_id(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="7")
        h.order(2, 0, 10, "k2", "u2", order_id="7")
        self.write(h, {"7": order("placed", "u1")}, stock=5)
        found = self.violations()
        self.assertEqual(found["duplicate_id"], 1)
        self.assertEqual(found["lost"], 1)       # u2's 201 names u1's order

    def test_idempotency_two_ids_acknowledged(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(1, 20, 30, "k1", "u1", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u1")},
                   stock=5, limit=5)
        self.assertEqual(self.violations(), {"idempotency": 1})

    def test_idempotency_retry_placed_a_second_order(self):
        h = History().order(1, 0, 10, "k1", "u1", "info", "1", 503, "outcome_unknown")
        h.order(1, 20, 30, "k1", "u1", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u1")},
                   stock=5, limit=5)
        self.assertEqual(self.violations(), {"idempotency": 1})

    def test_idempotency_near_miss_first_attempt_never_placed(self):
        h = History().order(1, 0, 10, "k1", "u1", "info", "1", 503, "outcome_unknown")
        h.order(1, 20, 30, "k1", "u1", order_id="2")
        self.write(h, {"1": None, "2": order("placed", "u1")})
        self.assertEqual(self.violations(), {})

    def test_pay_lost(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1").pay(1, 20, 30, "1")
        self.write(h, {"1": order("pending", "u1")}, pay_within_ms=60000)
        self.assertEqual(self.violations(), {"pay_lost": 1})

    def test_paid_returned(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1").pay(1, 20, 30, "1")
        h.order(2, 0, 10, "k2", "u2", order_id="2").pay(2, 20, 30, "2")
        h.cancel(2, 40, 50, "2", "u2")
        self.write(h, {"1": order("expired", "u1"), "2": order("paid", "u2")},
                   stock=2, pay_within_ms=60000)
        found = self.violations()
        self.assertEqual(found["paid_returned"], 2)
        self.assertEqual(found["cancel_lost"], 1)    # 2's cancel 200, paid at the end

    def test_paid_after_return(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.cancel(1, 5000, 5010, "1", "u1", "fail", 409, "expired")
        h.pay(1, 5020, 5030, "1")
        self.write(h, {"1": order("paid", "u1")}, pay_within_ms=5000)
        self.assertEqual(self.violations(), {"paid_after_return": 1})

    def test_paid_after_return_near_miss_concurrent(self):
        """A pay sent before the 409 expired was answered may have come first."""
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.cancel(1, 4990, 5010, "1", "u1", "fail", 409, "expired")
        h.pay(2, 4995, 5030, "1")
        self.write(h, {"1": order("paid", "u1")}, pay_within_ms=5000)
        self.assertEqual(self.violations(), {})

    def test_cancel_lost(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.cancel(1, 20, 30, "1", "u1")
        self.write(h, {"1": order("pending", "u1")}, pay_within_ms=60000)
        self.assertEqual(self.violations(), {"cancel_lost": 1})

    def test_fence_order(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        fences = [(0, "5:a"), (0, "5:a"), (0, "4:b"), (1, "9:x"), (1, "10:y"),
                  (2, "18446744073709551617"), (2, "9007199254740993"), (3, "3"),
                  (4, "1795993963245284@pg"), (4, "1795993963245918@pg"),
                  (5, "20@pg"), (5, "19@pg")]
        self.write(h, {"1": order("placed", "u1")}, fences=fences)
        status, out, _ = self.run_checker()
        self.assertEqual(self.violations(), {"fence_order": 3})
        self.assertIn("segment 5: token 19@pg", out)
        self.assertIn("segment 0: token 4:b (fences.jsonl line 3) accepted after 5:a", out)

    # --- the waiting room (run.json's room; join, poll, an order's pass)

    ROOM = {"rate_per_s": 2, "max_active": 3, "pass_ttl_ms": 1000}

    def room_run(self):
        """A room of 2 a second (2 banked), 3 live passes at most, passes of 1 s: users
        a-f join at places 10-60 and are admitted in that order at 1000 (the banked two),
        1500, 2000, 2500 and 3000 (Redis ms); a buys with its pass, after a thief x
        tried it (403); the others walk away. Every window is within the rate: 6 in
        [1000, 3000] <= 2 x 2 s + 2 + 1."""
        h = History()
        for i, user in enumerate("abcdef"):
            h.join(i + 1, 10 * i, 10 * i + 5, user, 10 * (i + 1))
        for i, (user, at) in enumerate(zip("abcdef", (1000, 1000, 1500, 2000, 2500, 3000))):
            h.poll(i + 1, at + 10, at + 20, user, at + 1000)
        h.order(1, 1100, 1110, "kx", "x", "fail", status=403, error="not_admitted",
                pass_=pass_of("a", 2000))
        h.order(1, 1120, 1130, "ka", "a", order_id="1", pass_=pass_of("a", 2000))
        return h

    def test_room_valid(self):
        self.write(self.room_run(), {"1": order("placed", "a")}, stock=6, room=self.ROOM)
        self.assertEqual(self.violations(), {})
        # what the rules saw: the bank of 2 at 1000 is a window at the bound (slack 0),
        # 2 passes live at most (a's at 1000 is used from its order at 1120: b and c at
        # 1500), the thief's 403
        report = checker.check(checker.load_run(self.dir))
        self.assertEqual(report["room"], {"admissions": 6, "rate_slack": 0, "peak_live": 2,
                                          "max_active": 3, "refused_403": 1})

    def test_room_rate(self):
        room = dict(self.ROOM, max_active=10)
        h = self.room_run().join(7, 0, 5, "g", 1).poll(7, 1010, 1020, "g", 2000)
        self.write(h, {"1": order("placed", "a")}, stock=6, room=room)
        self.assertEqual(self.violations(), {}, "3 at once: the bank of 2 and 1 rounding")
        h.join(8, 0, 5, "h", 2).poll(8, 1010, 1020, "h", 2000)
        self.write(h, {"1": order("placed", "a")}, stock=6, room=room)
        self.assertEqual(set(self.violations()), {"room_rate"})

    def test_room_active(self):
        # d admitted at 1500 beside c: 4 admissions in [1000, 1500] (within the rate),
        # and a, b, c, d live and unused at 1500 > 3 (a's order is invoked at 1120)
        h = self.room_run()
        h.events = [e for e in h.events if not (e["f"] == "poll" and e["user"] == "d")]
        h.poll(4, 1510, 1520, "d", 2500)
        self.write(h, {"1": order("placed", "a")}, stock=6, room=self.ROOM)
        self.assertEqual(self.violations(), {}, "a's order at 1120: its pass may be used")
        h.events = [e for e in h.events if not (e["f"] == "order" and e["user"] == "a")]
        self.write(h, {}, stock=6, room=self.ROOM)
        self.assertEqual(self.violations(), {"room_active": 1})
        # an undecided order may have bought: the pass is not counted from its invoke
        h.order(1, 1120, 1130, "ka", "a", "info", pass_=pass_of("a", 2000))
        self.write(h, {}, stock=6, room=self.ROOM)
        self.assertEqual(self.violations(), {})

    def test_room_order(self):
        h = self.room_run()
        h.events = [e for e in h.events if not (e["f"] == "poll" and e["user"] in "ef")]
        h.poll(5, 2510, 2520, "e", 3500).poll(6, 2530, 2540, "f", 3500)  # both at 2500
        self.write(h, {"1": order("placed", "a")}, stock=6, room=self.ROOM)
        self.assertEqual(self.violations(), {}, "e and f in one tick: either way")
        h.events = [e for e in h.events if not (e["f"] == "poll" and e["user"] in "ef")]
        h.poll(5, 3010, 3020, "e", 4000).poll(6, 2510, 2520, "f", 3500)  # f before e
        self.write(h, {"1": order("placed", "a")}, stock=6, room=self.ROOM)
        self.assertEqual(self.violations(), {"room_order": 1})

    def test_pass_theft(self):
        h = self.room_run()
        h.order(2, 1200, 1210, "kx2", "x", order_id="2", pass_=pass_of("a", 2000))
        h.order(3, 1600, 1610, "ky", "y", order_id="3")  # no pass at all
        final = {"1": order("placed", "a"), "2": order("placed", "x"),
                 "3": order("placed", "y")}
        self.write(h, final, stock=6, room=self.ROOM)
        self.assertEqual(self.violations(), {"pass_theft": 2})
        self.write(h, final, stock=6)  # no room: a pass is not needed
        self.assertEqual(self.violations(), {})

    def test_room_stock_rules_still_hold(self):
        h = self.room_run().order(2, 1600, 1610, "kb", "b", order_id="2",
                                  pass_=pass_of("b", 2000))
        self.write(h, {"1": order("placed", "a"), "2": order("placed", "b")}, stock=1,
                   room=self.ROOM)
        self.assertEqual(set(self.violations()), {"oversell"})

    # --- malformed input, and --expect-invalid

    def test_malformed_input_exits_2(self):
        good = History().order(1, 0, 10, "k1", "u1", order_id="1").lines()
        cases = {
            "history.jsonl:2: not JSON": [good[0], "{oops", good[1]],
            "history.jsonl:1: a completion of process 1": [good[1]],
            "history.jsonl:2: process 1 invokes again": [good[0], good[0]],
            "history.jsonl:1: \"qty\" must be": [good[0].replace('"qty": 1', '"qty": 0')],
            "history.jsonl:2: an ok order without an order_id":
                [good[0], good[1].replace('"1"', "null")],
        }
        for message, lines in cases.items():
            with self.subTest(message=message):
                self.write(lines, {"1": order("placed", "u1")})
                status, _, err = self.run_checker()
                self.assertEqual(status, 2)
                self.assertIn(message, err)
        self.write(good, {"1": order("placed", "u1")}, fences=[(0, "x:a")])
        status, _, err = self.run_checker()
        self.assertEqual((status, "fences.jsonl:1: \"token\" must be" in err), (2, True))
        os.remove(os.path.join(self.dir, "run.json"))
        status, _, err = self.run_checker()
        self.assertEqual((status, "run.json: cannot read" in err), (2, True))

    def test_invoke_never_completed_is_info(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 5, None, "k2", "u2", kind=None)
        h.order(3, 20, 30, "k3", "u3", "fail", error="sold_out")
        self.write(h, {"1": order("placed", "u1")}, stock=2)
        status, out, _ = self.run_checker()
        self.assertEqual(status, 0, out)
        self.assertIn("3 ops (1 ok, 1 fail, 1 info)", out)

    def test_expect_invalid(self):
        h = History().order(1, 0, 10, "k1", "u1", order_id="1")
        h.order(2, 20, 30, "k2", "u2", order_id="2")
        self.write(h, {"1": order("placed", "u1"), "2": order("placed", "u2")})
        self.assertEqual(self.run_checker("--expect-invalid", "lost,oversell")[0], 0)
        status, out, _ = self.run_checker("--expect-invalid", "lost,limit")
        self.assertEqual(status, 1)
        self.assertIn("checker is blind: expected lost, limit", out)
        self.assertEqual(self.run_checker("--expect-invalid", "oversold")[0], 2)


if __name__ == "__main__":
    unittest.main()
