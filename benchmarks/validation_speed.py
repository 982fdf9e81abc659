"""Validation throughput: classes and configured models validated per minute, by phase.

    python benchmarks/validation_speed.py                 # fixtures and the zoo, -j 1 and -j 2
    python benchmarks/validation_speed.py --only fixtures # or --only zoo
    python benchmarks/validation_speed.py --jobs 2        # one worker count

Validation dominates real runs (issue 29): this measures what a user waits for. Each target is
run as ``tsfix apply --rule all --dry-run --no-cache --report R.json -j N`` in a child process
(a fresh tsfix cache, nothing written):

* ``fixtures``: the rule fixture folders with example tables (``fixtures/<rule>/pyproject.toml``),
  one run each, summed;
* ``zoo``: the pinned zoo of ``tests/zoo.py`` (asteroid, speechbrain, torchaudio), its
  development targets configured as models (``zoo.DEVELOPMENT_TARGETS``).

Printed per target and worker count: wall seconds, class rewrites given a measured verdict
(verified or rejected) and configured models checked, each per minute of wall time, and the
seconds per phase from the report's ``phase_s`` (how long each phase ran, first item to last).
Ratios, not absolute numbers, travel between machines: compare ``-j 2`` with ``-j 1``, and a
branch with main on the same machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

CLI = "import sys; from tsfix.cli.main import main; main(sys.argv[1:])"
FIXTURE_FOLDERS = ("annotate", "lift-branch", "constant-flag", "none-module-test", "models",
                   "rules-together")


def run(folder: Path, paths: list[str], jobs: int, env: dict[str, str] | None = None
        ) -> tuple[float, dict[str, Any]]:
    """Wall seconds of one validated dry run over ``paths`` (in ``folder``), and its report."""
    with tempfile.TemporaryDirectory(prefix="tsfix-vspeed-") as scratch:
        report = Path(scratch) / "report.json"
        run_env = dict(env) if env is not None else None
        command = [sys.executable, "-c", CLI, "apply", "--rule", "all", "--dry-run",
                   "--no-cache", "-q", "--allow-unscriptable", "--report", str(report),
                   "-j", str(jobs), *paths]
        start = time.perf_counter()
        subprocess.run(command, cwd=folder, env=run_env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)
        seconds = time.perf_counter() - start
        data = json.loads(report.read_text()) if report.exists() else {}
    return seconds, data


def counted(data: dict[str, Any]) -> tuple[int, int, Counter[str]]:
    """Class rewrites with a measured verdict, models checked, seconds per phase."""
    measured = {(f["path"], c["class_name"]) for f in data.get("files", ())
                for c in f.get("classes", ()) if c.get("verdict") in ("verified", "rejected")}
    models = len(data.get("models", ()))
    phases: Counter[str] = Counter()
    for phase, seconds in data.get("phase_s", {}).items():
        phases[phase] += seconds
    return len(measured), models, phases


def fixtures(jobs: int) -> tuple[float, int, int, Counter[str]]:
    wall, classes, models, phases = 0.0, 0, 0, Counter[str]()
    for name in FIXTURE_FOLDERS:
        folder = ROOT / "fixtures" / name
        if not (folder / "pyproject.toml").is_file():
            continue
        with tempfile.TemporaryDirectory(prefix="tsfix-vspeed-fx-") as copy:
            target = Path(copy) / name
            shutil.copytree(folder, target)
            # The inputs only: the expected outputs have no example tables of their own.
            seconds, data = run(target, sorted(p.name for p in target.glob("*.in.py")), jobs)
        c, m, p = counted(data)
        wall, classes, models = wall + seconds, classes + c, models + m
        phases.update(p)
    return wall, classes, models, phases


def zoo_project(jobs: int) -> tuple[float, int, int, Counter[str]]:
    import zoo

    with tempfile.TemporaryDirectory(prefix="tsfix-vspeed-zoo-") as scratch:
        project = zoo.make_project(Path(scratch) / "zoo", ("asteroid", "speechbrain",
                                                           "torchaudio"),
                                   zoo.DEVELOPMENT_TARGETS)
        paths = sorted({model.path for model in zoo.DEVELOPMENT_TARGETS})
        seconds, data = run(project.root, paths, jobs, project.env())
    c, m, p = counted(data)
    return seconds, c, m, p


def line(label: str, jobs: int, result: tuple[float, int, int, Counter[str]]) -> str:
    wall, classes, models, phases = result
    per_minute = 60.0 / wall if wall else 0.0
    breakdown = ", ".join(f"{phase} {seconds:.1f}s" for phase, seconds in phases.items())
    return (f"{label:<9} -j {jobs}: {wall:6.1f}s wall, {classes} classes "
            f"({classes * per_minute:.1f}/min), {models} models ({models * per_minute:.1f}/min)"
            f"; {breakdown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--only", choices=("fixtures", "zoo"))
    parser.add_argument("--jobs", type=int, choices=(1, 2))
    args = parser.parse_args(argv)
    targets = {"fixtures": fixtures, "zoo": zoo_project}
    results = {}
    for label, measure in targets.items():
        if args.only and label != args.only:
            continue
        for jobs in ([args.jobs] if args.jobs else [1, 2]):
            results[(label, jobs)] = measure(jobs)
            print(line(label, jobs, results[(label, jobs)]), flush=True)
    for label in targets:
        one, two = results.get((label, 1)), results.get((label, 2))
        if one and two and two[0]:
            print(f"{label}: -j 2 is {one[0] / two[0]:.2f}x -j 1's speed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
