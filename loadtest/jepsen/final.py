#!/usr/bin/env python3
"""final.py: the end state of a loadtest/jepsen.sh run, read once every fault healed.

    final.py URL SKU RUN_DIR

Reads every order id that RUN_DIR/history.jsonl names (answers to orders, pays and
cancels), asks URL (an instance) for each with GET /orders/{id}, and for the SKU with
GET /skus/{SKU}, and writes RUN_DIR/final.json, as loadtest/jepsen/checker.py reads it:

    {"orders": {id: {"state", "user_id", "qty"} or null (404)}, "sku": {GET's body}}

An order the instance cannot tell about (no answer, 5xx) is asked again, 30 s at most
in all; after that the run has no end state: exit 1, and no final.json. Exit 2 on a
usage error.
"""
import http.client
import json
import os
import sys
import time
import urllib.parse

PATIENCE_S = 30.0


class Reader:
    """GETs over one kept-alive connection, asked again while the answer is undecided."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port = u.hostname, u.port or 80
        self.conn = None
        self.deadline = time.monotonic() + PATIENCE_S

    def get(self, path):
        """(status, body as JSON or None) of a GET answered 200 or 404."""
        while True:
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
                self.conn.request("GET", path)
                r = self.conn.getresponse()
                body = r.read()
                if r.status in (200, 404):
                    return r.status, json.loads(body) if r.status == 200 else None
                why = f"{r.status} {body[:80]!r}"
            except (OSError, http.client.HTTPException) as e:
                why = repr(e)
                self.conn = None
            if time.monotonic() > self.deadline:
                raise SystemExit(f"final.py: GET {path}: no answer in {PATIENCE_S:.0f} s ({why})")
            time.sleep(0.1)


def order_ids(history):
    """Every order id the history names, in the order first seen."""
    ids = {}
    with open(history) as f:
        for line in f:
            oid = json.loads(line).get("order_id")
            if oid:
                ids[oid] = True
    return list(ids)


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    url, sku, run = argv[1:]
    reader = Reader(url)
    orders = {}
    for oid in order_ids(os.path.join(run, "history.jsonl")):
        status, body = reader.get(f"/orders/{oid}")
        orders[oid] = None if status == 404 else {
            "state": body.get("state"), "user_id": body.get("user_id"), "qty": body.get("qty")}
    status, sku_body = reader.get(f"/skus/{urllib.parse.quote(sku)}")
    if status != 200:
        raise SystemExit(f"final.py: SKU {sku} not found")
    with open(os.path.join(run, "final.json"), "w") as f:
        json.dump({"orders": orders, "sku": sku_body}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
