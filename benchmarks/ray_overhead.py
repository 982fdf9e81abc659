"""Ray's overhead: the same validated runs through the local pool and through ``--executor ray``.

    python benchmarks/ray_overhead.py                 # the fixture folders, -j 2
    python benchmarks/ray_overhead.py --zoo           # and torchaudio's models from the zoo
    python benchmarks/ray_overhead.py -j 4 --fixtures lift-branch,models

Each case is copied into a temporary folder and run twice, ``tsfix apply --dry-run --no-cache
-j N --report R.json`` with ``--executor local`` and with ``--executor ray`` (no address: the run
starts a local Ray instance of N CPUs and stops it, both counted). Printed per case: both wall
times, their ratio, and whether the two reports' records agree (durations aside); then the
totals, and how long starting and stopping a local Ray instance takes alone. The fixtures: one
run per folder (each folder is a project of its own). ``--zoo``: torchaudio's DeepSpeech,
Wav2Letter and ConvTasNet files of the pinned zoo (``tests/zoo.py``, installed once) with their
example tables, ``--rule all``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

FIXTURES = ("lift-branch", "rules-together", "models", "annotate", "constant-flag",
            "lift-branch-rejected")
ZOO_MODELS = ("DeepSpeech", "Wav2Letter", "ConvTasNet")
CLI = "import sys; from tsfix.cli.main import main; main(sys.argv[1:])"


def comparable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if not k.endswith("_s")}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def timed_run(args: list[str], cwd: Path, env: dict[str, str] | None, executor: str,
              jobs: int) -> tuple[float, int, Any]:
    report = cwd / f"report-{executor}.json"
    command = [sys.executable, "-c", CLI, "apply", "--dry-run", "--no-cache", "-q", "-j",
               str(jobs), "--executor", executor, "--report", str(report), *args]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if not report.is_file():
        sys.exit(f"{executor} run wrote no report (exit {done.returncode}):\n{done.stderr}")
    return seconds, done.returncode, comparable(json.loads(report.read_text()))


def case(name: str, args: list[str], cwd: Path, env: dict[str, str] | None,
         jobs: int) -> tuple[float, float]:
    local, local_code, local_report = timed_run(args, cwd, env, "local", jobs)
    ray, ray_code, ray_report = timed_run(args, cwd, env, "ray", jobs)
    same = "same records" if (local_report, local_code) == (ray_report, ray_code) \
        else "RECORDS DIFFER"
    print(f"{name:28} local {local:7.1f}s   ray {ray:7.1f}s   ratio {ray / local:5.2f}   "
          f"{same}", flush=True)
    return local, ray


def ray_start_stop(jobs: int) -> float:
    code = (f"import logging, ray; ray.init(num_cpus={jobs}, include_dashboard=False, "
            "logging_level=logging.ERROR); ray.shutdown()")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--fixtures", default=",".join(FIXTURES),
                        help="comma-separated fixture folders")
    parser.add_argument("--zoo", action="store_true", help="also torchaudio's zoo models")
    options = parser.parse_args()
    totals = [0.0, 0.0]
    with tempfile.TemporaryDirectory(prefix="tsfix-ray-bench-") as tmp:
        work = Path(tmp)
        for name in filter(None, options.fixtures.split(",")):
            folder = work / name
            shutil.copytree(ROOT / "fixtures" / name, folder,
                            ignore=shutil.ignore_patterns("__pycache__", "*.out.py"))
            local, ray = case(f"fixtures/{name}", ["."], folder, None, options.jobs)
            totals[0] += local
            totals[1] += ray
        if options.zoo:
            import zoo

            models = [m for m in (*zoo.DEVELOPMENT_TARGETS, *zoo.OTHER_MODELS)
                      if m.cls in ZOO_MODELS and m.path.startswith("torchaudio/")]
            project = zoo.make_project(work / "zoo", ["torchaudio"], models)
            local, ray = case(f"zoo torchaudio ({len(models)} models)",
                              ["--rule", "all", *sorted({m.path for m in models})],
                              project.root, project.env(), options.jobs)
            totals[0] += local
            totals[1] += ray
    print(f"{'total':28} local {totals[0]:7.1f}s   ray {totals[1]:7.1f}s   "
          f"ratio {totals[1] / totals[0]:5.2f}")
    print(f"starting and stopping a local Ray instance alone: {ray_start_stop(options.jobs):.1f}s")


if __name__ == "__main__":
    main()
