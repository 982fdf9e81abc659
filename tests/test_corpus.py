"""Every rule over real model zoos: no internal error, outputs parse, a second pass is a no-op.

The corpus is the pure-Python source of pinned wheels (``tests/corpus.py``), downloaded once and
cached. One ``--rule all --no-verify`` run rewrites a copy of it (the same rewrite ``--dry-run``
shows, written so that it can be checked), then a ``--check`` run over the rewritten copy must
find nothing left to change.

A file whose *source* LibCST cannot parse (Python 2 syntax, say) or decode is counted and
reported but is not a failure; a file that fails for any other reason is. The numbers are
printed (``pytest -s`` or ``-rA`` shows them) and written to ``last-run.json`` in the corpus
cache.

The registry must be reachable: a failed download fails the test. Offline, set
``TSFIX_SKIP_CORPUS=1`` to skip it; CI never sets it (the test fails if it sees both).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import time
import traceback
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from corpus import MANIFEST, PINS, CorpusUnavailable, Pin, cache_root, fetch_all, manifest
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.report import RunResult
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.pipeline.sources import read_source
from tsfix.codemods.rules.registry import ALL_RULES

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus_trees() -> dict[Pin, Path]:
    if os.environ.get("TSFIX_SKIP_CORPUS") == "1":
        if os.environ.get("CI"):
            pytest.fail("TSFIX_SKIP_CORPUS=1 is set in CI: the corpus test must run there")
        pytest.skip("TSFIX_SKIP_CORPUS=1: real-code corpus not checked")
    try:
        return fetch_all()
    except CorpusUnavailable as exc:
        problem = str(exc)
    pytest.fail(problem, pytrace=False)


def _category(error: str) -> str:
    """internal (tsfix's fault), source-parse (LibCST cannot parse the input), or read."""
    if "internal error" in error:
        return "internal"
    if ": cannot parse:" in error:
        return "source-parse"
    if "cannot read" in error or "not valid" in error or "encoding" in error:
        return "read"
    return "other"


def _traceback(path: Path, display: str) -> str:
    """Re-run the rewrite of one file outside the engine, for the exception's traceback."""
    try:
        rewrite_source(read_source(path).text, RewriteSettings(list(ALL_RULES.values())), display)
    except Exception:
        return traceback.format_exc(limit=-6)
    return "(does not fail when rewritten alone)"


@dataclass
class Numbers:
    """What one corpus run found; printed and written to ``last-run.json``."""

    pins: list[str]
    files: int
    megabytes: float
    statuses: dict[str, int]
    per_package: dict[str, dict[str, int]]
    class_rewrites: dict[str, int]          # per rule
    skips: dict[str, int]                   # per rule
    failures: dict[str, list[str]]          # category -> error messages
    second_pass_changed: list[str]
    second_pass_failed: int
    seconds: dict[str, float]

    def text(self) -> str:
        lines = [f"corpus: {', '.join(self.pins)}",
                 f"  {self.files} files ({self.megabytes:.1f} MB); statuses {self.statuses}"]
        lines += [f"    {package}: {counts}" for package, counts in self.per_package.items()]
        lines.append(f"  class rewrites per rule: {self.class_rewrites}")
        lines.append(f"  skips per rule: {self.skips}")
        lines.append(f"  failed files by cause: "
                     f"{ {k: len(v) for k, v in self.failures.items()} }")
        lines += [f"    {category}: {message}" for category, messages in self.failures.items()
                  for message in messages]
        lines.append(f"  second pass: {len(self.second_pass_changed)} changed, "
                     f"{self.second_pass_failed} failed")
        lines.append(f"  wall time (s): {self.seconds}")
        return "\n".join(lines)


def _numbers(first: RunResult, second: RunResult, root: Path, pins: dict[Pin, Path],
             seconds: dict[str, float]) -> Numbers:
    per_package: dict[str, Counter[str]] = {}
    failures: dict[str, list[str]] = {}
    for f in first.files:
        package = f.path.resolve().relative_to(root.resolve()).parts[0]
        per_package.setdefault(package, Counter())[f.status] += 1
        if f.status == "failed":
            failures.setdefault(_category(f.error or ""), []).append(f.error or f.display)
    return Numbers(
        pins=[pin.key for pin in pins],
        files=len(first.files),
        megabytes=sum(int(str(manifest(tree)["bytes"])) for tree in pins.values()) / 1e6,
        statuses=dict(Counter(f.status for f in first.files)),
        per_package={k: dict(v) for k, v in sorted(per_package.items())},
        class_rewrites=dict(Counter(c.rule for c in first.classes())),
        skips=dict(Counter(s.rule for f in first.files for s in f.skips)),
        failures=failures,
        second_pass_changed=[f.display for f in second.files if f.status == "changed"],
        second_pass_failed=sum(f.status == "failed" for f in second.files),
        seconds={k: round(v, 1) for k, v in seconds.items()},
    )


def test_rules_on_model_zoos(corpus_trees: dict[Pin, Path], tmp_path: Path) -> None:
    assert [pin.key for pin in corpus_trees] == [pin.key for pin in PINS]
    root = tmp_path / "corpus"
    for pin, tree in corpus_trees.items():
        shutil.copytree(tree, root / pin.key, ignore=shutil.ignore_patterns(MANIFEST))
    # An empty [tool.tsfix] table: defaults, and no configuration from above the copy.
    config = root / "pyproject.toml"
    config.write_text("[tool.tsfix]\n", encoding="utf-8")
    originals = {path: path.read_bytes() for path in root.rglob("*.py")}

    started = time.perf_counter()
    first = run([root], Options(rules=["all"], mode="write", verify=False, config=config))
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    second = run([root], Options(rules=["all"], mode="check", verify=False, config=config))
    second_s = time.perf_counter() - started

    numbers = _numbers(first, second, root, corpus_trees,
                       {"rewrite": first_s, "second_pass": second_s})
    text = numbers.text()
    print(text)
    with contextlib.suppress(OSError):
        (cache_root() / "last-run.json").write_text(
            json.dumps(asdict(numbers), indent=2) + "\n", encoding="utf-8")

    # Every file the engine saw was read from the copy, and nothing else was written.
    assert len(first.files) == len(originals)
    failed = [f for f in first.files if f.status == "failed"]
    # A source that does not parse or decode is the input's problem; anything else is ours.
    internal = [f for f in failed if _category(f.error or "") in ("internal", "other")]
    assert not internal, "internal errors (or unexpected failures):\n" + "\n\n".join(
        f"{f.error}\n{_traceback(Path(str(f.path)), f.display)}" for f in internal)

    changed = {f.path for f in first.files if f.status == "changed"}
    assert changed, text
    assert all(f.written for f in first.files if f.status == "changed")
    untouched = [p for p, data in originals.items() if p not in changed and p.read_bytes() != data]
    assert not untouched, f"files written although not reported changed: {untouched[:10]}"

    # Every rewritten file parses for CPython too (the engine already re-parses with LibCST).
    not_parsing = []
    for path in sorted(changed):
        try:
            with warnings.catch_warnings():   # the zoos' own invalid escapes, not ours
                warnings.simplefilter("ignore", SyntaxWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                ast.parse(path.read_bytes(), filename=str(path))
        except SyntaxError as exc:
            not_parsing.append(f"{path}:{exc.lineno}: {exc.msg}")
    assert not not_parsing, "rewritten files that do not parse:\n" + "\n".join(not_parsing)

    # Idempotence: the rewritten tree has nothing left to change, and fails the same files.
    again = {f.display: f for f in second.files if f.status == "changed"}
    assert not again, f"{len(again)} files change again on a second pass:\n" + "\n".join(
        f.diff for f in list(again.values())[:5])
    assert sorted(f.error or "" for f in second.files if f.status == "failed") == sorted(
        f.error or "" for f in failed)
