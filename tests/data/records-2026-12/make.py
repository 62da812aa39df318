"""Writes this folder's files with the jaxtune of the day (run once, at commit 2971832,
before the records moved to one typed codec; ``tests/test_record_formats.py`` reads them).

    PYTHONPATH=. python tests/data/records-2026-12/make.py
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from records_2026_12 import capture_info, code_digest, entries, plan  # noqa: E402

from jaxtune._core.codec import packb  # noqa: E402
from jaxtune._tuning.store.cache import CacheStore  # noqa: E402
from jaxtune._tuning.store.result_files import save  # noqa: E402


def main() -> None:
    CacheStore(HERE / "cache").write(entries())
    save(HERE / "result.msgpack", entries())
    (HERE / "plan.msgpack").write_bytes(packb(plan().to_dict()))
    (HERE / "digest.msgpack").write_bytes(packb(code_digest().to_wire()))
    info = capture_info()
    (HERE / "jaxtune-info.msgpack").write_bytes(packb({**info.to_dict(), "iterations": 3}))
    recording = HERE / "recording.msgpack"
    recording.write_bytes(b"")
    env = {
        **os.environ,
        "PYTHONPATH": f"{HERE.parent.parent}:{HERE.parent.parent.parent}",
        "JAXTUNE_RECORD": str(recording),
        "JAXTUNE_RECORD_STOP": "1",
        "JAXTUNE_RECORD_SETTLE": "0.5",
        "JAXTUNE_MODE": "cached",
        "JAX_PLATFORMS": "cpu",
    }
    program = "import records_2026_12 as r; r.main_program(); import time; time.sleep(30)"
    subprocess.run([sys.executable, "-c", program], env=env, check=True)


if __name__ == "__main__":
    main()
