"""Issue 55 on a real machine: `jaxtune profile --` and `jaxtune tune --` of a program with a
Pallas matmul (`jaxtune.examples.pallas_matmul`), run with canary variables set, then every
file they wrote (log dir, cache dir, temporary folder) searched for the canaries and for the
value of every variable of this machine's environment outside docs/files.md's allow-list.

    python3 tools/tpu/canary_search.py OUT [--size N]

Writes ``OUT/canary_search.json`` and prints a summary; exits 1 when a canary or a variable
outside the allow-list was found (a path variable's value found only as the start of a longer
path, as a source's ``file:line`` holds it, is listed apart and allowed: docs/files.md lets
reports name the sources they point at).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parents[2]
#: Names docs/files.md lets a file hold the value of.
ALLOWED = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "JAX_PLATFORMS")
ALLOWED_PREFIXES = ("JAX_", "JAXTUNE_")
#: A value shorter than this is too common a word to search for (``1``, ``true``, ``C``).
SHORTEST = 8

PROGRAM = textwrap.dedent(
    """
    import jax, jax.numpy as jnp
    import jaxtune
    from jaxtune.examples.pallas_matmul import matmul

    @jaxtune.profiled
    @jax.jit
    def step(x, y):
        return jnp.tanh(matmul(x, y).astype(jnp.float32)).sum()

    x = jnp.ones(({n}, {n}), jnp.bfloat16)
    for _ in range(3):
        print("loss", float(step(x, x)), flush=True)
    """
)


def files(folder: pathlib.Path) -> list[pathlib.Path]:
    return [p for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]


def contents(path: pathlib.Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".gz":
        with contextlib.suppress(OSError, EOFError):
            data += gzip.decompress(data)
    return data


def only_as_path_prefix(data: bytes, value: bytes) -> bool:
    """Whether every occurrence of directory ``value`` in ``data`` starts a longer path."""
    at = data.find(value)
    while at >= 0:
        if data[at + len(value) : at + len(value) + 1] != b"/":
            return False
        at = data.find(value, at + 1)
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=pathlib.Path)
    parser.add_argument("--size", type=int, default=1024, help="the matmul's square size")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    machine = dict(os.environ)
    canary = f"jaxtune-canary-{uuid.uuid4().hex}"
    canaries = {
        name: f"{canary}-{name.lower()}"
        for name in ("CANARY_TOKEN", "MY_SECRET", "AWS_SECRET_ACCESS_KEY", "PLAIN_CANARY_VAR")
    }
    root = pathlib.Path(tempfile.mkdtemp(prefix="jaxtune-canary-"))
    written = {name: root / name for name in ("logs", "cache", "tmp")}
    for folder in written.values():
        folder.mkdir()
    program = root / "prog" / "prog.py"
    program.parent.mkdir()
    program.write_text(PROGRAM.format(n=args.size))
    env = {k: v for k, v in machine.items() if not k.startswith("JAXTUNE_")}
    env.update(
        canaries,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), machine.get("PYTHONPATH", "")])),
        TMPDIR=str(written["tmp"]),
        JAXTUNE_CACHE_DIR=str(written["cache"]),
    )
    jaxtune = [sys.executable, "-m", "jaxtune"]
    python = [sys.executable, str(program)]
    flows = {
        "profile": [*jaxtune, "profile", "--logdir", str(written["logs"] / "prof"), "--", *python],
        "tune": [*jaxtune, "tune", "--json", "--", *python],
    }
    runs = {}
    for name, command in flows.items():
        start = time.monotonic()
        done = subprocess.run(
            command, env=env, capture_output=True, text=True, cwd=program.parent, timeout=540
        )
        runs[name] = {
            "returncode": done.returncode,
            "seconds": round(time.monotonic() - start, 1),
            "stdout_tail": done.stdout[-1500:],
            "stderr_tail": done.stderr[-3000:],
        }
        print(f"{name}: exit {done.returncode} in {runs[name]['seconds']} s", flush=True)
    searched = {where: files(folder) for where, folder in written.items()}
    searched_out = {where: [str(p.relative_to(root)) for p in ps] for where, ps in searched.items()}
    canary_hits = []
    machine_hits, path_prefix_hits = [], []
    candidates = {
        name: value
        for name, value in machine.items()
        if name not in ALLOWED
        and not name.startswith(ALLOWED_PREFIXES)
        and len(value) >= SHORTEST
        and not value.isdigit()
    }
    for paths in searched.values():
        for path in paths:
            data = contents(path)
            where = str(path.relative_to(root))
            if canary.encode() in data:
                canary_hits.append(where)
            for name, value in candidates.items():
                raw = value.encode()
                if raw not in data:
                    continue
                hit = {"variable": name, "file": where, "count": data.count(raw)}
                is_dir = value.startswith("/") and os.path.isdir(value)
                if is_dir and only_as_path_prefix(data, raw):
                    path_prefix_hits.append(hit)
                else:
                    machine_hits.append(hit)
    result = {
        "runs": runs,
        "searched": searched_out,
        "variables_searched": sorted(candidates),
        "canary_hits": canary_hits,
        "machine_hits": machine_hits,
        "path_prefix_hits": path_prefix_hits,
    }
    (args.out / "canary_search.json").write_text(json.dumps(result, indent=1))
    n_files = sum(len(ps) for ps in searched.values())
    print(f"searched {n_files} files for {len(candidates)} variables of this machine + canaries")
    print(f"canary found in: {canary_hits or 'no file'}")
    print(f"variables outside the allow-list found: {machine_hits or 'none'}")
    print(f"path variables found only as the start of a source's path: {path_prefix_hits}")
    failed = any(r["returncode"] != 0 for r in runs.values())
    return 1 if canary_hits or machine_hits or failed else 0


if __name__ == "__main__":
    sys.exit(main())
