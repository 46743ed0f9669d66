#!/usr/bin/env python3
"""Per-kernel time table from `ncu --csv --metrics gpu__time_duration.sum`.

usage: ncu-kernel-table.py NCU.csv STEPS

Sums the duration (ns) of every launch by kernel name (template arguments cut
to 60 characters) and grid, divides by STEPS and prints the rows with most time
first: launches per step, microseconds per step, mean microseconds per launch.
"""
import csv
import io
import sys
from collections import defaultdict


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    text = open(path, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit(f"{path}: no ncu CSV table")
    rows = csv.DictReader(io.StringIO(text[start:]))
    total = defaultdict(float)
    count = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"]
        if "(" in name:
            name = name[: name.index("(")]
        key = (name[:60], r.get("Grid Size", ""), r.get("Block Size", ""))
        total[key] += float(r["Metric Value"].replace(",", ""))
        count[key] += 1
    all_ns = sum(total.values())
    print(f"{sum(count.values()) / steps:.0f} launches/step, {all_ns / steps / 1e3:.0f} us of kernel time per step")
    print(f"{'us/step':>9} {'n/step':>7} {'us/launch':>9}  kernel [grid] [block]")
    for key, ns in sorted(total.items(), key=lambda kv: -kv[1]):
        n = count[key]
        print(f"{ns / steps / 1e3:9.1f} {n / steps:7.1f} {ns / n / 1e3:9.1f}  {key[0]} {key[1]} {key[2]}")


if __name__ == "__main__":
    main()
