"""A run answered from the cache against the first run over the same tree.

    python benchmarks/cached_speed.py [DIR ...]     # default: fixtures/ and torch/nn/modules

For each folder: a copy in a temporary directory, an empty cache, then ``tsfix apply --rule all
--no-verify --dry-run -j 1`` twice, each a fresh ``python -m tsfix.cli.main`` process timed
from start to exit (what a user waits for), after a warm-up run that leaves every module
compiled. The first run parses, rewrites and formats every
file and fills the cache; the second finds every file's outcome in it. The second is timed
best of ``--rounds``; the ratio first / second is the speed-up (target: at least 20x), and the
modules the cached run loaded say whether it stayed clear of LibCST and black.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 20.0
HEAVY = ("libcst", "black", "torch")

PROBE = f"""\
import json, sys
from tsfix.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({{"exit": code, "heavy": sorted(m for m in {HEAVY!r} if m in sys.modules)}}))
"""


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_run(folder: Path, cache: Path) -> tuple[float, float, dict[str, object]]:
    """Wall and CPU seconds of one tsfix process, and what it reported."""
    arguments = ["apply", "--rule", "all", "--no-verify", "--dry-run", "-q", "-j", "1",
                 str(folder)]
    env = dict(os.environ, TSFIX_CACHE_DIR=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)     # as installed: compiled modules are reused
    started, cpu = time.perf_counter(), cpu_of_children()
    done = subprocess.run([sys.executable, "-c", PROBE, *arguments], capture_output=True,
                          text=True, env=env, cwd=folder.parent, check=False)
    elapsed, cpu = time.perf_counter() - started, cpu_of_children() - cpu
    if done.returncode != 0:
        raise SystemExit(f"tsfix failed on {folder}:\n{done.stderr}")
    found: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return elapsed, cpu, found


@dataclasses.dataclass
class Measured:
    files: int
    first_wall: float
    first_cpu: float
    cached_wall: float           # best of the rounds
    cached_cpu: float
    heavy: list[str]             # of LibCST, black, torch: what the cached run imported


def measure(folder: Path, rounds: int) -> Measured:
    with tempfile.TemporaryDirectory(prefix="tsfix-cached-speed-") as scratch:
        copy = Path(scratch) / folder.name
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("__pycache__"))
        files = sum(1 for _ in copy.rglob("*.py"))
        # Warm-up on another cache: every module tsfix loads is compiled (.pyc) before timing.
        timed_run(copy, Path(scratch) / "warm-up")
        cache = Path(scratch) / "cache"
        first_wall, first_cpu, _ = timed_run(copy, cache)
        walls, cpus, heavy = [], [], []
        for _ in range(rounds):
            wall, cpu, found = timed_run(copy, cache)
            walls.append(wall)
            cpus.append(cpu)
            heavy = list(found["heavy"])  # type: ignore[call-overload]
        return Measured(files, first_wall, first_cpu, min(walls), min(cpus), heavy)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--rounds", type=int, default=3, help="cached runs (best is kept)")
    args = parser.parse_args()
    folders = args.folders or default_folders()
    print(f"{'tree':<24} {'files':>5} {'first s':>8} {'cached s':>9} {'ratio':>6}"
          f" {'first cpu':>10} {'cached cpu':>11} {'ratio':>6}  cached run loaded")
    worst_wall = worst_cpu = float("inf")
    for folder in folders:
        m = measure(folder.resolve(), args.rounds)
        wall, cpu = m.first_wall / m.cached_wall, m.first_cpu / m.cached_cpu
        worst_wall, worst_cpu = min(worst_wall, wall), min(worst_cpu, cpu)
        print(f"{str(folder)[-24:]:<24} {m.files:>5} {m.first_wall:>8.2f} {m.cached_wall:>9.3f} "
              f"{wall:>5.1f}x {m.first_cpu:>10.2f} {m.cached_cpu:>11.3f} {cpu:>5.1f}x  "
              f"{', '.join(m.heavy) or 'neither LibCST nor black'}")
    for what, worst in (("wall", worst_wall), ("CPU", worst_cpu)):
        verdict = "met" if worst >= TARGET_RATIO else "MISSED"
        print(f"target: cached run >= {TARGET_RATIO:g}x faster than the first ({what} time, "
              f"worst tree {worst:.1f}x): {verdict}")
    print("(CPU time is what a busy machine does not distort: other load stretches wall time, "
          "most for the short cached run)")


def default_folders() -> list[Path]:
    folders = [Path(__file__).resolve().parent.parent / "fixtures"]
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec and spec.origin:
        folders.append(Path(spec.origin).parent / "nn" / "modules")
    return folders


if __name__ == "__main__":
    main()
