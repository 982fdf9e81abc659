"""A validated tsfix run over real model zoos with configured models: how long, and where it goes.

    python benchmarks/zoo_models.py                   # all zoo models, -j 2
    python benchmarks/zoo_models.py --targets-only    # only the three development targets
    python benchmarks/zoo_models.py --keep DIR        # keep the project, report and log in DIR

The zoo of ``tests/zoo.py`` (asteroid, speechbrain, torchaudio, installed once and cached) is
copied into a writable project whose ``pyproject.toml`` has example tables for the development
targets and, unless ``--targets-only``, the other zoo models (``zoo.DEVELOPMENT_TARGETS``,
``zoo.OTHER_MODELS``). Then one ``tsfix apply --rule all --report R.json -j N`` over the three
packages, in a child process with an empty tsfix cache (validation included), the zoo's site on
``PYTHONPATH`` for the validation workers. Printed:

* wall time and exit code;
* phases: when each phase's progress lines arrived on stderr (a phase shorter than the progress
  display's log interval prints none), and the time the report gives to rewriting files,
  validating classes (by verdict) and checking models;
* verdict totals, the most common reasons for ``unverified``, and the share of rewritten classes
  reached by a configured model (verdict ``from model ...``) that ended verified or rejected;
* one line per configured model from the report's ``models`` records (read defensively: the
  field set may grow).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import zoo  # tests/zoo.py: the pinned zoo the tests use too

PACKAGES = ("asteroid", "speechbrain", "torchaudio")
CLI = "import sys; from tsfix.cli.main import main; main(sys.argv[1:])"
# The progress display's phase labels (cli/progress.py), most specific first.
PHASE_LABELS = (("rewriting without each rule", "trials"), ("rechecking", "recheck"),
                ("leaving rejected rewrites out", "final"),
                ("scripting configured models", "models"), ("fix loop", "fix"),
                ("observing", "observe"), ("rewriting", "rewrite"), ("validating", "validate"))


def run_tsfix(project: zoo.Project, report: Path, jobs: int, timeout: float | None,
              cache: Path, log: Path) -> tuple[float, int, dict[str, list[float]]]:
    """Wall seconds, exit code, and for each phase the seconds (from the start) at which its
    progress lines arrived."""
    command = [sys.executable, "-c", CLI, "apply", "--rule", "all", "--report", str(report),
               "-j", str(jobs), *PACKAGES]
    if timeout is not None:
        command[command.index("-j"):command.index("-j")] = ["--timeout", str(timeout)]
    env = project.env()
    env["TSFIX_CACHE_DIR"] = str(cache)
    seen: dict[str, list[float]] = defaultdict(list)
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(command, cwd=project.root, env=env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        stdout_lines: list[str] = []
        reader = threading.Thread(target=lambda: stdout_lines.extend(process.stdout or ()))
        reader.start()
        for line in process.stderr:
            at = time.perf_counter() - started
            out.write(f"[{at:8.1f}s] {line}")
            for label, phase in PHASE_LABELS:
                if re.search(rf"\b{re.escape(label)} \d+/\d+", line):
                    seen[phase].append(at)
                    break
        code = process.wait()
        reader.join()
        out.write("---- stdout ----\n" + "".join(stdout_lines))
    return time.perf_counter() - started, code, seen


def reason_kind(reason: str) -> str:
    """A reason without what is specific to one class: the kind of reason, for counting."""
    reason = re.sub(r"^from model \S+: ", "", reason)
    reason = re.sub(r"\[tool\.tsfix\.examples\.\"[^\"]+\"\]", "[...]", reason)
    head = re.split(r"[;(]", reason, maxsplit=1)[0]
    parts = head.split(":")
    return ":".join(parts[:2]).strip()[:90]


def model_line(record: dict[str, Any]) -> str:
    """The run's own line for a model record, rebuilt from whatever fields it has."""
    name = str(record.get("model", "?"))
    status = str(record.get("status", "?"))
    reason = str(record.get("reason", ""))
    before = record.get("scripted_before")
    before_text = ("" if before is None else " (scripted before tsfix)" if before else
                   " (did not script before tsfix)")
    if status == "scripts":
        text = f"{name}: model scripts{before_text}: {reason}"
    elif status == "error":
        text = f"{name}: model not checked: {reason}"
    else:
        blocker = record.get("blocker")
        if isinstance(blocker, dict):       # an older draft of the record nested the blocker
            where = f"{blocker.get('path', '?')}:{blocker.get('line', '?')}"
        else:
            where = str(blocker) if blocker else ""
        scope = record.get("scope")
        at = f" at {where}" + (f" ({scope})" if scope else "") if where else ""
        text = f"{name}: model does not script{before_text}{at}: {reason}"
    extra = []
    if record.get("explain"):
        extra.append(f"    explain: {str(record['explain']).splitlines()[0]}")
    rounds = record.get("rounds") or []
    if rounds:
        extra.append(f"    fix loop: {len(rounds)} round(s)")
        extra += [f"      {r}" for r in rounds]
    if record.get("duration_s"):
        extra.append(f"    checked in {float(record['duration_s']):.1f} s")
    return "\n".join([text, *extra])


def summarize(report: dict[str, Any], wall: float, code: int,
              seen: dict[str, list[float]]) -> None:
    print(f"wall time {wall:.1f} s, exit code {code}")
    files = report.get("files", [])
    classes = [c for f in files for c in f.get("classes", [])]

    print("\nphases (progress lines seen on stderr, seconds from start):")
    if seen:
        for _label, phase in PHASE_LABELS:
            if phase in seen:
                times = seen[phase]
                print(f"  {phase:<9} {times[0]:7.1f} .. {times[-1]:7.1f}  ({len(times)} lines)")
    else:
        print("  none (every phase was shorter than the progress log interval)")
    rewrite_s = sum(float(f.get("rewrite_s", 0.0)) for f in files)
    by_verdict: dict[str, float] = defaultdict(float)
    for c in classes:
        by_verdict[str(c.get("verdict"))] += float(c.get("duration_s", 0.0))
    models = report.get("models") or [m for f in files for m in f.get("models", [])]
    model_s = sum(float(m.get("duration_s", 0.0)) for m in models if isinstance(m, dict))
    print(f"  rewriting files (sum over files)       {rewrite_s:8.1f} s")
    for verdict, seconds in sorted(by_verdict.items()):
        print(f"  validating {verdict:<12} (sum)         {seconds:8.1f} s")
    print(f"  checking configured models (sum)       {model_s:8.1f} s")

    summary = report.get("summary", {})
    print("\ntotals: " + ", ".join(f"{k} {v}" for k, v in summary.items()))
    rules = Counter(str(c.get("rule")) for c in classes)
    print("rewrites by rule: " + ", ".join(f"{r} {n}" for r, n in rules.most_common()))
    verdicts = Counter(str(c.get("verdict")) for c in classes)
    print("verdicts: " + ", ".join(f"{v} {n}" for v, n in verdicts.most_common()))
    reasons = Counter(reason_kind(str(c.get("reason", ""))) for c in classes
                      if c.get("verdict") == "unverified")
    if reasons:
        print("unverified, by reason:")
        for kind, n in reasons.most_common(8):
            print(f"  {n:5d}  {kind}")
    reached = [c for c in classes if str(c.get("reason", "")).startswith("from model ")]
    if reached:
        decided = sum(c.get("verdict") in ("verified", "rejected") for c in reached)
        print(f"rewritten classes reached by a configured model: {len(reached)}, "
              f"{decided} verified or rejected ({100 * decided / len(reached):.0f}%; target 90%)")
    else:
        print("rewritten classes reached by a configured model: none reported")

    print("\nconfigured models:")
    if not models:
        print("  no model records in the report")
    for record in models:
        if isinstance(record, dict):
            print("  " + model_line(record).replace("\n", "\n  "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=None,
                        help="tsfix --timeout (seconds per file's validation)")
    parser.add_argument("--targets-only", action="store_true",
                        help="tables for the development targets only")
    parser.add_argument("--keep", type=Path, default=None,
                        help="keep the project, the report and the log in this new folder")
    args = parser.parse_args()

    try:
        site = zoo.install()
    except zoo.ZooUnavailable as exc:
        sys.exit(f"zoo unavailable: {exc}")
    models = zoo.DEVELOPMENT_TARGETS + (() if args.targets_only else zoo.OTHER_MODELS)
    work = Path(tempfile.mkdtemp(prefix="tsfix-zoo-models.")) if args.keep is None else args.keep
    if args.keep is not None:
        work.mkdir(parents=True)
    try:
        project = zoo.make_project(work / "project", PACKAGES, models, site)
        report_path, log = work / "report.json", work / "tsfix.log"
        print(f"{len(models)} configured models over {', '.join(PACKAGES)}; "
              f"tsfix apply --rule all -j {args.jobs} (log: {log})", flush=True)
        wall, code, seen = run_tsfix(project, report_path, args.jobs, args.timeout,
                                     work / "cache", log)
        if not report_path.is_file():
            tail = log.read_text(encoding="utf-8").splitlines()[-20:]
            sys.exit(f"tsfix wrote no report (exit code {code}):\n" + "\n".join(tail))
        summarize(json.loads(report_path.read_text(encoding="utf-8")), wall, code, seen)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"\nkept in {work}")


if __name__ == "__main__":
    main()
