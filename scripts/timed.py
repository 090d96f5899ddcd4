"""Time the stages of `make test` and print them as a table at the end, failed ones included.

    python3 scripts/timed.py FILE STAGE -- COMMAND...   # run COMMAND; append STAGE's times and exit status to FILE
    python3 scripts/timed.py FILE --report STAGE...     # the table of FILE in this order; exit 1 if a stage failed

Each stage is timed by its own wrapper process, so the CPU seconds (user + system, of the command and every
process it waited for) are the stage's own even when two stages run at once. CPU seconds say what a stage
costs whatever else the machine is doing; wall seconds say how long it took here. A stage listed for the
report but absent from FILE did not run (a stage it waits for failed, or make stopped). Standard library
only: the venv stage runs before the virtual environment exists.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time


def run(times: str, stage: str, command: list[str]) -> int:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began, start = time.time(), time.monotonic()
    try:
        returncode = subprocess.call(command)
    except KeyboardInterrupt:
        returncode = 130
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    os.makedirs(os.path.dirname(times) or ".", exist_ok=True)
    with open(times, "a", encoding="utf-8") as f:  # one short line: concurrent stages append whole lines
        f.write(f"{stage}\t{wall:.1f}\t{cpu:.1f}\t{returncode}\t{began:.1f}\t{began + wall:.1f}\n")
    return returncode


def report(times: str, stages: list[str]) -> int:
    rows: dict[str, tuple[float, float, int]] = {}
    spans = []
    if os.path.exists(times):
        with open(times, encoding="utf-8") as f:
            for line in f:
                name, wall, cpu, returncode, began, ended = line.rstrip("\n").split("\t")
                rows[name] = (float(wall), float(cpu), int(returncode))
                spans.append((float(began), float(ended)))
    order = stages + [name for name in rows if name not in stages]
    print(f"\n{'stage':<8} {'wall s':>7} {'CPU s':>7}  result")
    for name in order:
        if name in rows:
            wall, cpu, returncode = rows[name]
            result = "ok" if returncode == 0 else f"FAILED (exit {returncode})"
            print(f"{name:<8} {wall:>7.0f} {cpu:>7.0f}  {result}")
        else:
            print(f"{name:<8} {'-':>7} {'-':>7}  not run")
    cpu_total = sum(cpu for _, cpu, _ in rows.values())
    elapsed = max(e for _, e in spans) - min(b for b, _ in spans) if spans else 0.0
    print(f"{'total':<8} {elapsed:>7.0f} {cpu_total:>7.0f}  (first start to last end; stages overlap)")
    failed = [name for name in order if name in rows and rows[name][2] != 0]
    missing = [name for name in order if name not in rows]
    if failed or missing:
        print("make test FAILED: " + "; ".join(
            [f"failed: {', '.join(failed)}"] * bool(failed) + [f"not run: {', '.join(missing)}"] * bool(missing)))
    return 1 if failed or missing else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "--report":
        return report(argv[0], argv[2:])
    if len(argv) >= 4 and argv[2] == "--":
        return run(argv[0], argv[1], argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
