"""tsfix's rewrite phase on the pinned model-zoo corpus, against LibCST's parse + codegen floor.

    python benchmarks/corpus_speed.py                  # the corpus of tests/corpus.py
    python benchmarks/corpus_speed.py --fraction 0.25  # its first quarter (files in sorted order)
    python benchmarks/corpus_speed.py DIR ...          # any folders instead

In one run, each measurement in a fresh child process (so that peak RSS is its own):

* LibCST: ``parse_module(src).code`` over every file tsfix is given, and over the files tsfix's
  ``may_define_module`` pre-filter keeps (the ones it parses);
* tsfix: ``run(..., Options(rules=["all"], mode="diff", verify=False))``, the whole rewrite phase
  (discovery, read, pre-filter, parse, every rule, black on touched lines, re-parse, diff),
  nothing written, at 25%, 50% and 100% of the files with ``jobs=1``: files/s and peak RSS show
  whether time is linear and memory flat in the number of files;
* ``jobs=2`` against ``jobs=1`` on all files, when :class:`Options` has a ``jobs`` field;
* ``tsfix --help`` and ``tsfix rules`` start-up, best of 5, and whether torch gets imported.

Targets: tsfix within 1.5x of LibCST single-process, near-linear scaling with workers, peak
memory flat in the number of files, start-up under 0.3 s.
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
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

STARTUP_TARGET_S = 0.3
RATIO_TARGET = 1.5
SHARES = (0.25, 0.5, 1.0)


# ---- child measurements (one per process) ------------------------------------------------------

def _peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    # ru_maxrss is in KiB on Linux, bytes on macOS; for RUSAGE_CHILDREN, the largest child.
    peak = resource.getrusage(who).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def child_libcst(files: list[Path], prefiltered: bool) -> dict[str, object]:
    """Parse + codegen of every file (or of those the pre-filter keeps), with the time spent
    up to the end of each share of ``files``: the floor for tsfix on that share."""
    import libcst as cst
    from tsfix.codemods.facts.syntax import may_define_module

    texts: list[str | None] = []
    for path in files:
        try:
            text: str | None = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            text = None
        if text is not None and prefiltered and not may_define_module(text):
            text = None
        texts.append(text)
    marks = {share_end(len(files), share): share for share in SHARES}
    at: dict[str, float] = {}
    started, cpu = time.perf_counter(), time.process_time()
    parsed = 0
    for i, text in enumerate(texts, 1):
        if text is not None:
            try:
                cst.parse_module(text).code  # noqa: B018
                parsed += 1
            except cst.ParserSyntaxError:
                pass
        if i in marks:
            at[str(marks[i])] = time.perf_counter() - started
    return {"files": sum(t is not None for t in texts), "parsed": parsed,
            "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu,
            "rss_mb": _peak_rss_mb(), "at": at}


def share_end(count: int, share: float) -> int:
    """How many of ``count`` files make up ``share`` of them (at least one)."""
    return max(1, round(count * share))


def child_tsfix(files: list[Path], jobs: int) -> dict[str, Any]:
    from tsfix.codemods.pipeline.engine import Options, run

    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "pyproject.toml"
        config.write_text("[tool.tsfix]\n", encoding="utf-8")
        options = Options(rules=["all"], mode="diff", verify=False, config=config)
        if jobs and "jobs" in {f.name for f in dataclasses.fields(Options)}:
            options = dataclasses.replace(options, jobs=jobs)
        started, cpu = time.perf_counter(), time.process_time()
        result = run(list(files), options)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"files": len(result.files), "changed": result.counts()["changed"],
            "failed": result.counts()["failed"], "seconds": seconds,
            "cpu": cpu + children.ru_utime + children.ru_stime,   # the rewrite processes' too
            "processes": getattr(result, "rewrite_processes", 0),
            "children_cpu": children.ru_utime + children.ru_stime,
            "rss_mb": _peak_rss_mb(), "child_rss_mb": _peak_rss_mb(resource.RUSAGE_CHILDREN)}


def measure(kind: str, files: list[Path], **kwargs: object) -> dict[str, Any]:
    """Run one measurement in a fresh interpreter; the file list goes through a temp file."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"kind": kind, "files": [str(p) for p in files], **kwargs}, handle)
    try:
        done = subprocess.run([sys.executable, __file__, "--child", handle.name],
                              capture_output=True, text=True, check=False)
    finally:
        os.unlink(handle.name)
    if done.returncode != 0:
        raise SystemExit(f"{kind} measurement failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def child_main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    files = [Path(p) for p in spec["files"]]
    if spec["kind"] == "libcst":
        out = child_libcst(files, spec["prefiltered"])
    else:
        out = child_tsfix(files, spec["jobs"])
    print(json.dumps(out))


# ---- start-up ----------------------------------------------------------------------------------

def startup(args: list[str], rounds: int = 5) -> float:
    exe = shutil.which("tsfix")
    command = [exe, *args] if exe else [sys.executable, "-m", "tsfix.cli.main", *args]
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, check=True)
        best = min(best, time.perf_counter() - started)
    return best


def imports_torch(args: list[str]) -> bool:
    probe = ("import sys\nfrom tsfix.cli.main import main\nsys.argv = ['tsfix', *sys.argv[1:]]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print('torch' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True,
                          check=True)
    return done.stderr.strip().splitlines()[-1] == "True"


# ---- the report --------------------------------------------------------------------------------

def corpus_files(folders: list[Path]) -> list[Path]:
    from tsfix.codemods.pipeline.sources import discover

    return [p for p in discover(folders, None, []) if isinstance(p, Path)]


def default_folders() -> list[Path]:
    from corpus import fetch_all

    return list(fetch_all().values())


def row(label: str, m: dict[str, Any], floor: float | None = None) -> str:
    rate = m["files"] / m["seconds"] if m["seconds"] else float("inf")
    ratio = f"{m['seconds'] / floor:>6.2f}x" if floor else " " * 7
    return (f"{label:<34} {int(m['files']):>6} {m['seconds']:>8.1f} {m['cpu']:>8.1f} "
            f"{rate:>8.1f} {ratio} {m['rss_mb']:>8.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="*", type=Path)
    parser.add_argument("--fraction", type=float, default=1.0,
                        help="use this leading share of the files (sorted order)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return

    folders = args.folders or default_folders()
    files = corpus_files(folders)
    files = files[: max(1, round(len(files) * args.fraction))]
    size = sum(p.stat().st_size for p in files)
    print(f"corpus: {len(files)} files, {size / 1e6:.1f} MB, from "
          f"{', '.join(f.name for f in folders)}; {os.cpu_count()} cores")
    print(f"{'measurement':<34} {'files':>6} {'wall s':>8} {'cpu s':>8} {'files/s':>8} "
          f"{'ratio':>7} {'peak MB':>8}")

    floor = measure("libcst", files, prefiltered=False)
    print(row("libcst parse+codegen, all files", floor), flush=True)
    kept = measure("libcst", files, prefiltered=True)
    print(row("libcst parse+codegen, pre-filtered", kept), flush=True)

    sizes: dict[float, dict[str, Any]] = {}
    for share in SHARES:
        part = files[: share_end(len(files), share)]
        sizes[share] = measure("tsfix", part, jobs=1)
        print(row(f"tsfix rewrite phase, {share:.0%}, -j 1", sizes[share],
                  floor["at"][str(share)]), flush=True)
    full = sizes[1.0]
    ratio = full["seconds"] / floor["seconds"]
    print(f"rewrite phase / libcst (all files, single process): {ratio:.2f}x "
          f"(target <= {RATIO_TARGET}x); / libcst on the pre-filtered files: "
          f"{full['seconds'] / kept['seconds']:.2f}x")
    # CPU seconds do not count what other processes on a shared machine took from the wall.
    print(f"  by CPU time: {full['cpu'] / floor['cpu']:.2f}x; on the pre-filtered files: "
          f"{full['cpu'] / kept['cpu']:.2f}x")
    rss = [sizes[s]["rss_mb"] for s in SHARES]
    print(f"peak RSS at 25/50/100% of the files: {rss[0]:.0f} / {rss[1]:.0f} / {rss[2]:.0f} MB "
          f"(100% / 25%: {rss[2] / rss[0]:.2f}x; flat is ~1.0x)")

    from tsfix.codemods.pipeline.engine import Options

    if "jobs" in {f.name for f in dataclasses.fields(Options)}:
        two = measure("tsfix", files, jobs=2)
        print(row("tsfix rewrite phase, 100%, -j 2", two, floor["seconds"]))
        print(f"-j 2 speed-up over -j 1: {full['seconds'] / two['seconds']:.2f}x "
              f"(near-linear is ~2.0x); {int(two['processes'])} rewrite processes, their cpu "
              f"{two['children_cpu']:.1f} s, largest peak RSS {two['child_rss_mb']:.0f} MB")
    else:
        print("-j 1 vs -j 2: skipped (tsfix.codemods.pipeline.engine.Options has no 'jobs' field)")

    for args_ in (["--help"], ["rules"]):
        best = startup(args_)
        torch = imports_torch(args_)
        verdict = "ok" if best < STARTUP_TARGET_S and not torch else "OVER TARGET"
        print(f"tsfix {' '.join(args_):<8} start-up: {best * 1000:.0f} ms best of 5 "
              f"(target < {STARTUP_TARGET_S * 1000:.0f} ms), imports torch: {torch}  {verdict}")


if __name__ == "__main__":
    main()
