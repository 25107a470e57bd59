#!/usr/bin/env python3
"""fences.py: the fencing tokens the data Redis accepted, from its MONITOR feed.

    fences.py MONITOR_LOG BATCH_LUA OUT

MONITOR_LOG is what `redis-cli MONITOR` printed during a loadtest/jepsen.sh run (the
feed of every restart of Redis appended in turn); BATCH_LUA the group commit's script
as the server loads it (build/gen/inventory/lua/batch.lua), whose SHA1 names it in the
feed. Writes OUT, one JSON line per fenced batch Redis let through, in the order Redis
ran them, as loadtest/jepsen/checker.py reads it:

    {"segment": S, "token": "<n>:<owner>", "<n>@pg" or a czxid, "time": Redis's time in ms}

How a batch is known to have passed its fence, without the service's word: Redis
feeds MONITOR a script's EVALSHA and then each call the script makes ("[0 lua]"
lines) before the next command of any client. batch.lua's first call reads the SKU's
meta, its second the fence (inventory/lua/batch.lua), and it returns there when the
token is not the fence's; any third call means the token passed. Batches with token
'0' (fencing off) are not fenced and not listed. The single-order commit of an order
drawn from several segments (commit.lua) is not read: its tokens are not listed.
"""
import hashlib
import json
import re
import sys

ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


def batches(lines, sha):
    """(time_ms, segment, token, calls) of each batch.lua run in the feed."""
    cur = None
    for line in lines:
        if "[0 lua]" in line or " lua] " in line:
            if cur is not None:
                cur[3] += 1
            continue
        if cur is not None:
            yield tuple(cur)
            cur = None
        if '"EVALSHA"' not in line and '"evalsha"' not in line:
            continue
        args = ARG.findall(line)
        if len(args) < 3 or args[1] != sha:
            continue
        nkeys = int(args[2])
        argv = args[3 + nkeys:]
        if len(argv) < 4:
            continue
        cur = [float(line.split(" ", 1)[0]) * 1000, int(argv[1]), argv[3], 0]
    if cur is not None:
        yield tuple(cur)


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[2], "rb") as f:
        sha = hashlib.sha1(f.read()).hexdigest()
    n = 0
    with open(argv[1], errors="replace") as f, open(argv[3], "w") as out:
        for t, seg, token, calls in batches(f, sha):
            if token != "0" and calls >= 3:
                out.write(json.dumps({"segment": seg, "token": token, "time": t}) + "\n")
                n += 1
    print(f"fences.py: {n} fenced batches passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
