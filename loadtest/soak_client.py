#!/usr/bin/env python3
"""soak_client.py BASE_URL PHASE [args]: the shop soak's buyers and merchant
(loadtest/soak.sh), over keep-alive HTTP connections from a pool of threads.

  put FIRST LAST STOCK PAY_MS    PUT /skus/s<i> for i in FIRST..LAST
  sell FIRST LAST ORDERS         ORDERS orders on each SKU (one buyer each); of each
                                 SKU's orders the first is paid, the second cancelled,
                                 the rest left to expire; prints the counts
  retire FIRST LAST              DELETE each, again later while 409 not_settled

Prints one JSON line of counts. Admin token from $SOAK_TOKEN (none: open)."""
import http.client
import json
import os
import queue
import sys
import threading
import time
import urllib.parse

THREADS = int(os.environ.get("SOAK_THREADS", "16"))
TOKEN = os.environ.get("SOAK_TOKEN", "")


class Pool:
    def __init__(self, base):
        u = urllib.parse.urlparse(base)
        self.host, self.port = u.hostname, u.port or 80
        self.local = threading.local()

    def request(self, method, path, body=None, admin=False):
        for attempt in range(3):
            c = getattr(self.local, "c", None)
            if c is None:
                c = self.local.c = http.client.HTTPConnection(self.host, self.port, timeout=30)
            headers = {"Content-Type": "application/json"}
            if admin and TOKEN:
                headers["Authorization"] = "Bearer " + TOKEN
            try:
                c.request(method, path, body=body, headers=headers)
                r = c.getresponse()
                data = r.read()
                return r.status, data
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.c = None
        return 0, b""


def run(pool, jobs, work):
    q = queue.Queue()
    for j in jobs:
        q.put(j)
    out, lock = {}, threading.Lock()

    def worker():
        while True:
            try:
                j = q.get_nowait()
            except queue.Empty:
                return
            for k in work(pool, j):
                with lock:
                    out[k] = out.get(k, 0) + 1

    ts = [threading.Thread(target=worker) for _ in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def put(pool, i, stock, pay_ms):
    s, _ = pool.request("PUT", f"/skus/s{i}",
                        json.dumps({"stock": stock, "segments": 2, "per_user_limit": 1,
                                    "pay_within_ms": pay_ms}), admin=True)
    return [f"put_{s}"]


def sell(pool, i, orders):
    got = []
    for n in range(orders):
        s, b = pool.request("POST", f"/skus/s{i}/orders",
                            json.dumps({"user_id": f"b{i}-{n}", "qty": 1}))
        if s != 201:
            try:
                got.append(f"order_{s}_{json.loads(b).get('error', '')}")
            except ValueError:
                got.append(f"order_{s}")
            continue
        got.append(f"order_{s}")
        oid = json.loads(b)["order_id"]
        if n == 0:
            s2, _ = pool.request("POST", f"/orders/{oid}/pay",
                                 json.dumps({"payment_id": f"p{oid}"}), admin=True)
            got.append(f"pay_{s2}")
        elif n == 1:
            s2, _ = pool.request("POST", f"/orders/{oid}/cancel",
                                 json.dumps({"user_id": f"b{i}-{n}"}))
            got.append(f"cancel_{s2}")
    return got


def retire(pool, i):
    deadline = time.time() + 30
    while True:
        s, _ = pool.request("DELETE", f"/skus/s{i}", admin=True)
        if s != 409 or time.time() > deadline:
            return [f"retire_{s}"]
        time.sleep(0.5)


def main():
    base, phase = sys.argv[1], sys.argv[2]
    a = [int(x) for x in sys.argv[3:]]
    pool = Pool(base)
    t0 = time.time()
    rng = range(a[0], a[1] + 1)
    if phase == "put":
        out = run(pool, rng, lambda p, i: put(p, i, a[2], a[3]))
    elif phase == "sell":
        out = run(pool, rng, lambda p, i: sell(p, i, a[2]))
    elif phase == "retire":
        out = run(pool, rng, lambda p, i: retire(p, i))
    else:
        sys.exit(f"soak_client: unknown phase {phase}")
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
