#!/usr/bin/env python3
"""state_tables.py [ROOT]: each state machine's table (a comment with a "state"
column) against its enum: a state named in one and not in the other is printed, one
line each; nothing when they agree. The machines are the files of inventory/ and lock/
with such a comment (a header's opening one, or one inside a .c file, as life.c's pay
and cancel); the enum is the file's that shares the most names with the table, its
members' common prefix (HOLD_, END_) left out."""
import os
import re
import sys


def table_states(comment):
    """The names of the first column of the table whose header says "state"."""
    states, inside = set(), False
    for line in comment.splitlines():
        body = re.sub(r"^\s*/?\*+ ?", "", line)
        if re.match(r"\s*state\s{2,}", body):
            inside = True
            continue
        if not inside or re.match(r"\s*-{3,}", body):
            continue
        if not body.strip():
            if states:
                break
            continue
        first = re.match(r"\s{2}([A-Z][A-Z_]*(?:, [A-Z][A-Z_]*)*)(?:\s{2,}|$)", body)
        if first:
            states.update(n.strip() for n in first.group(1).split(","))
    return states


def enums(text):
    """Each enum of text as (prefix, {member without it}): the prefix is what
    all its members share up to an underscore (HOLD_, RF_)."""
    found = []
    for body in re.findall(r"enum\s*\w*\s*\{(.*?)\}", text, flags=re.S):
        body = re.sub(r"/\*.*?\*/", " ", body, flags=re.S)
        names = re.findall(r"\b([A-Z][A-Z0-9]*_[A-Z0-9_]+)\b", body)
        if not names:
            continue
        prefix = os.path.commonprefix(names)
        prefix = prefix[: prefix.rfind("_") + 1]
        if prefix:
            found.append((prefix, {n[len(prefix):] for n in names}))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    found = 0
    for folder in ("inventory", "lock"):
        for name in sorted(os.listdir(os.path.join(root, folder))):
            if not name.endswith((".h", ".c")):
                continue
            text = open(os.path.join(root, folder, name)).read()
            for comment in re.findall(r"/\*.*?\*/", text, flags=re.S):
                table = table_states(comment)
                if not table:
                    continue
                found += 1
                best = max(enums(text), key=lambda e: len(e[1] & table),
                           default=("", set()))
                prefix, enum = best
                where = f"{folder}/{name}"
                if not enum & table:
                    print(f"{where}: a state table and no enum of its states")
                    continue
                for st in sorted(table - enum):
                    print(f"{where}: {st} is in the table, not in the enum ({prefix}*)")
                for st in sorted(enum - table):
                    print(f"{where}: {prefix}{st} is in the enum, not in the table")
    if not found:
        print("no state table found")


if __name__ == "__main__":
    main()
