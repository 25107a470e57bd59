#!/usr/bin/env python3
"""call_rings.py [ROOT]: the .c files of one folder (service, inventory, lock, redis)
that call each other, directly or round a ring; one line per ring, nothing when none.

call_rings.py --doc MD [ROOT]: for inventory/ and lock/, each file's "calls:" list in
MD's table of folders (`name.c` (... calls: `a`, `b`), or among those that "call no
other") against what the file calls; one line per file where they differ, or that MD
does not list; nothing when they agree.

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


DOC_FOLDERS = ("inventory", "lock")


def documented(md, folder):
    """{file name without .c: set of callees} from folder's row of md's table."""
    row = next((line for line in open(md) if line.startswith(f"| `{folder}/` |")), "")
    said, none_from = {}, row.find("call no other")
    for m in re.finditer(r"`(\w+)\.c`(?: / `\w+\.h`)? \(", row):
        depth, i = 1, m.end()
        while i < len(row) and depth:
            depth += {"(": 1, ")": -1}.get(row[i], 0)
            i += 1
        body = row[m.end():i - 1]
        listed = re.search(r"calls: ((?:`\w+`(?:, )?)+)$", body)
        if listed:
            said[m.group(1)] = set(re.findall(r"`(\w+)`", listed.group(1)))
        elif none_from >= 0 and m.start() > none_from:
            said[m.group(1)] = set()
    return said


def main():
    args = sys.argv[1:]
    md = None
    if args[:1] == ["--doc"]:
        md, args = os.path.abspath(args[1]), args[2:]
    os.chdir(args[0] if args else ".")
    paths = [os.path.join(d, f) for d in FOLDERS if os.path.isdir(d)
             for f in sorted(os.listdir(d)) if f.endswith(".c")]
    exported, private = definitions(paths)
    graph = {p: calls(p, exported, private) for p in paths}
    if md is None:
        for ring in sorted(rings(graph)):
            print(" <-> ".join(ring))
        return
    for folder in DOC_FOLDERS:
        said = documented(md, folder)
        for p in sorted(x for x in paths if os.path.dirname(x) == folder):
            name = os.path.basename(p)[:-2]
            real = {os.path.basename(c)[:-2] for c in graph[p]}
            if name not in said:
                print(f"{p}: not in the table (it calls {', '.join(sorted(real)) or 'none'})")
            elif said[name] != real:
                print(f"{p}: the table says it calls {', '.join(sorted(said[name])) or 'none'}; "
                      f"it calls {', '.join(sorted(real)) or 'none'}")
        for name in sorted(set(said) - {os.path.basename(x)[:-2] for x in paths}):
            print(f"{folder}/{name}.c: in the table, not in the tree")


if __name__ == "__main__":
    main()
