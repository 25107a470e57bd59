#!/usr/bin/env python3
"""call_rings.py [ROOT]: the .c files of one folder (service, inventory, lock, redis)
that call each other, directly or round a ring; one line per ring, nothing when none.

A file calls another when it names, followed by "(", a function the other defines
and does not declare static (definitions from Universal Ctags; calls found by name,
comments left out). A lower file reaches a higher one only through a pointer it was
given, which this does not see as a call: that is the point."""
import os
import re
import subprocess
import sys

FOLDERS = ("service", "inventory", "lock", "redis")


def definitions(paths):
    """{name: file} of the functions each file exports, {file: names} of its static ones."""
    out = subprocess.run(["ctags", "-x", "--c-kinds=f", "--language-force=C"] + paths,
                         capture_output=True, text=True, check=True).stdout
    exported, private = {}, {p: set() for p in paths}
    for line in out.splitlines():
        fields = line.split(None, 4)
        if len(fields) < 5:
            continue
        name, path, text = fields[0], fields[3], fields[4]
        if text.lstrip().startswith("static"):
            private[path].add(name)
        else:
            exported.setdefault(name, path)
    return exported, private


def calls(path, exported, private):
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", open(path, errors="replace").read(), flags=re.S)
    folder = os.path.dirname(path)
    callees = set()
    for name in set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", text)):
        other = exported.get(name)
        if other and other != path and os.path.dirname(other) == folder \
                and name not in private[path]:
            callees.add(other)
    return callees


def rings(graph):
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    index, low, on, stack, found, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                ring = []
                while True:
                    member = stack.pop()
                    on.discard(member)
                    ring.append(member)
                    if member == node:
                        break
                if len(ring) > 1:
                    found.append(sorted(ring))
    return found


def main():
    os.chdir(sys.argv[1] if len(sys.argv) > 1 else ".")
    paths = [os.path.join(d, f) for d in FOLDERS if os.path.isdir(d)
             for f in sorted(os.listdir(d)) if f.endswith(".c")]
    exported, private = definitions(paths)
    graph = {p: calls(p, exported, private) for p in paths}
    for ring in sorted(rings(graph)):
        print(" <-> ".join(ring))


if __name__ == "__main__":
    main()
