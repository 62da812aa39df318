"""Names the native stacks that ``TIMELINE_NATIVE`` sampled on the chip (bench/_timeline.py,
tools/tpu/native_sampler.c): for each trace's stop, the functions its samples were in,
inclusive (a function anywhere on the stack) and by leaf, with how many samples each.

Run here, on the files that came back, with the same libtpu.so and jaxlib as on the chip
(their symbol tables name the addresses; ``nm`` reads them once into PREFIX.syms.*):

    python tools/tpu/native_symbols.py PREFIX [--lib /path/to/libtpu.so ...] [--top 40]
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import pathlib
import struct
import subprocess


def records(path: str) -> list[tuple[int, list[int]]]:
    """``(monotonic ns, return addresses)`` of each sample."""
    data = pathlib.Path(path).read_bytes()
    out, at = [], 0
    while at + 16 <= len(data):
        ns, n = struct.unpack_from("<qq", data, at)
        at += 16
        out.append((ns, list(struct.unpack_from(f"<{n}Q", data, at))))
        at += 8 * n
    return out


def mappings(path: str) -> list[tuple[int, int, int, str]]:
    """``(start, end, file offset, file)`` of each file-backed mapping."""
    out = []
    for line in pathlib.Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        out.append((start, end, int(parts[2], 16), parts[5]))
    return sorted(out)


class Symbols:
    """One file's defined functions, sorted by address, from ``nm``."""

    def __init__(self, path: str, cache: str) -> None:
        if not os.path.exists(cache):
            text = subprocess.run(
                ["nm", "-C", "--defined-only", "-S", path], capture_output=True, text=True
            ).stdout
            if not text.strip():  # no symbol table: the dynamic one
                text = subprocess.run(
                    ["nm", "-C", "-D", "--defined-only", "-S", path], capture_output=True, text=True
                ).stdout
            with open(cache, "w") as f:
                f.write(text)
        rows = []
        for line in pathlib.Path(cache).read_text().splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4 and parts[2] in "tTwW":
                rows.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
        rows.sort()
        self.starts = [r[0] for r in rows]
        self.rows = rows

    def name(self, address: int) -> str | None:
        i = bisect.bisect_right(self.starts, address) - 1
        if i < 0:
            return None
        start, size, name = self.rows[i]
        return name if address < start + max(size, 1) else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("prefix")
    parser.add_argument("--lib", action="append", default=[], help="a local copy of a mapped file")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    local = {os.path.basename(p): p for p in args.lib}
    maps = mappings(f"{args.prefix}.maps")
    starts = [m[0] for m in maps]
    bases: dict[str, int] = {}
    for start, _, offset, path in maps:
        if offset == 0 and path not in bases:
            bases[path] = start
    symbols: dict[str, Symbols | None] = {}

    def name(address: int) -> str:
        i = bisect.bisect_right(starts, address) - 1
        if i < 0 or address >= maps[i][1]:
            return f"?{address:#x}"
        path = maps[i][3]
        base = os.path.basename(path)
        if base not in symbols:
            where = local.get(base)
            symbols[base] = (
                Symbols(where, f"{args.prefix}.syms.{base}")
                if where and os.path.exists(where)
                else None
            )
        table = symbols[base]
        offset = address - bases.get(path, maps[i][0])
        got = table.name(offset - 1) if table is not None else None  # return address: the call
        return f"{got[:160]} [{base}]" if got else f"{base}+{offset:#x}"

    stops = json.loads(pathlib.Path(f"{args.prefix}.stops").read_text())
    samples = records(f"{args.prefix}.stacks")
    for k, (start, end) in enumerate(stops):
        inside = [frames for ns, frames in samples if start <= ns <= end]
        if not inside:
            continue
        print(f"## stop {k}: {(end - start) / 1e9:.2f} s, {len(inside)} samples")
        inclusive: collections.Counter[str] = collections.Counter()
        leaf: collections.Counter[str] = collections.Counter()
        for frames in inside:
            named = [name(a) for a in frames[2:]]  # past the handler and the signal frame
            leaf[named[0] if named else "?"] += 1
            for n in set(named):
                inclusive[n] += 1
        print("inclusive:")
        for n, c in inclusive.most_common(args.top):
            print(f"  {c:5d} {100 * c / len(inside):5.1f}%  {n}")
        print("leaf:")
        for n, c in leaf.most_common(args.top // 2):
            print(f"  {c:5d} {100 * c / len(inside):5.1f}%  {n}")


if __name__ == "__main__":
    main()
