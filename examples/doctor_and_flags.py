"""Check the toolchain and build a profiling environment for a child process.

Run: python examples/doctor_and_flags.py
"""

from __future__ import annotations

from jaxtune import flags
from jaxtune._cli import doctor as _doctor


def main() -> None:
    report = _doctor.collect(probe=False)
    print("toolchain ok:", report["ok"])
    for problem in report["problems"]:
        print(f"  [{problem['severity']}] {problem['message']} -> {problem['fix']}")

    # The environment a TPU child would get, merged with the user's own flags. The binary
    # check is off here because this example also runs where libtpu is not installed.
    env = flags.child_env(
        "tpu",
        base={"LIBTPU_INIT_ARGS": "--xla_enable_custom_call_region_trace=true"},
        profiling=True,
        custom_call_tracing=True,
        check_binary=False,
    )
    print("LIBTPU_INIT_ARGS for the child:", env["LIBTPU_INIT_ARGS"])


if __name__ == "__main__":
    main()
