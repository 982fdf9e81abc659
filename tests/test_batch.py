"""Whole-zoo runs: the rewrite phase in several processes gives what one process gives; the
summary table and ``tsfix report``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from conftest import model_source
from tsfix.cli.main import main as cli_main
from tsfix.codemods.engine import PARALLEL_MIN_FILES, Options, run
from tsfix.codemods.report import ClassResult, FileResult, RunResult
from tsfix.codemods.rule import Skip


def _zoo(root: Path, models: int) -> Path:
    """``models`` lift-branch candidates plus files every run must also handle: one that does
    not parse, one that is not a model, one model with nothing to rewrite."""
    zoo = root / "zoo"
    for i in range(models):
        (zoo / f"family{i % 3}").mkdir(parents=True, exist_ok=True)
        (zoo / f"family{i % 3}" / f"model_{i:02d}.py").write_text(
            model_source(f"Net{i}", flag=f"use_{i}"))
    (zoo / "broken.py").write_text("class Broken(nn.Module:\n    pass\n")
    (zoo / "utils.py").write_text("def helper(x):\n    return x\n")
    (zoo / "plain.py").write_text(model_source().replace("if self.use_act:", "if True:"))
    return zoo


def _comparable(data: dict[str, Any]) -> dict[str, Any]:
    """A report without what depends on the machine: process count and timings."""
    files = [{key: value for key, value in f.items() if key != "rewrite_s"}
             for f in data["files"]]
    return {**{key: value for key, value in data.items() if key != "rewrite_processes"},
            "files": files}


def test_parallel_rewrite_matches_one_process(tmp_path: Path) -> None:
    zoo = _zoo(tmp_path, PARALLEL_MIN_FILES + 6)
    options = {"rules": ["lift-branch"], "verify": False, "mode": "diff"}

    alone = run([zoo], Options(**options, jobs=1))
    together = run([zoo], Options(**options, jobs=2))

    assert alone.rewrite_processes == 0
    assert together.rewrite_processes >= 1      # the work left this process
    assert _comparable(together.to_json()) == _comparable(alone.to_json())
    statuses = {f.display.rsplit("/", 1)[-1]: f.status for f in together.files}
    assert statuses["broken.py"] == "failed" and statuses["utils.py"] == "skipped"
    assert statuses["plain.py"] == "unchanged"
    assert sum(status == "changed" for status in statuses.values()) == PARALLEL_MIN_FILES + 6
    # Results keep discovery order whatever order the processes finished in.
    assert [f.path for f in together.files] == [f.path for f in alone.files]


def test_parallel_write_writes_what_one_process_writes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    zoos = [_zoo(first, PARALLEL_MIN_FILES), _zoo(second, PARALLEL_MIN_FILES)]

    run([zoos[0]], Options(rules=["lift-branch"], verify=False, jobs=1))
    result = run([zoos[1]], Options(rules=["lift-branch"], verify=False, jobs=2))

    assert result.rewrite_processes >= 1
    written = sorted(p.relative_to(zoos[1]) for p in zoos[1].rglob("*.py"))
    assert written == sorted(p.relative_to(zoos[0]) for p in zoos[0].rglob("*.py"))
    for relative in written:
        assert (zoos[1] / relative).read_text() == (zoos[0] / relative).read_text()
    assert "use_0: Optional[bool] = None" in (zoos[1] / "family0" / "model_00.py").read_text()


def test_few_files_are_rewritten_in_this_process(tmp_path: Path) -> None:
    zoo = _zoo(tmp_path, 3)
    result = run([zoo], Options(rules=["lift-branch"], verify=False, mode="diff", jobs=4))
    assert result.rewrite_processes == 0
    assert sum(f.status == "changed" for f in result.files) == 3


# ---- summary table and `tsfix report` ----------------------------------------------------------

def _run_result() -> RunResult:
    def cls(rule: str, name: str, verdict: str, reason: str, seconds: float) -> ClassResult:
        return ClassResult(rule, name, (3, 9), f"{rule} did something", {}, verdict, reason,
                           seconds)

    files = [
        FileResult(Path("a.py"), "a.py", "changed", classes=[
            cls("lift-branch", "A", "verified", "ok", 4.0),
            cls("annotate", "A", "verified", "ok", 4.0)]),
        FileResult(Path("b.py"), "b.py", "rejected", classes=[
            cls("lift-branch", "B", "rejected",
                "re-script: RuntimeError: 'Tensor' object has no attribute 'foo' for init[0]",
                9.5)]),
        FileResult(Path("c.py"), "c.py", "rejected", classes=[
            cls("annotate", "C", "rejected",
                "re-script: RuntimeError: 'Tensor' object has no attribute 'bar' for init[1]",
                1.0),
            cls("annotate", "D", "unverified", "no example inputs", 0.0)]),
        FileResult(Path("d.py"), "d.py", "failed", error="d.py:1:1: cannot parse"),
        FileResult(Path("e.py"), "e.py", "unchanged",
                   skips=[Skip("annotate", "E", 4, "cannot type x")]),
    ]
    return RunResult(files, ["lift-branch", "annotate"], "diff", True, False)


def test_summary_table_counts_rules_verdicts_slowest_and_reasons() -> None:
    table = _run_result().summary_table(top=2)
    assert table == [
        "  files     5 scanned, 1 changed, 1 unchanged, 1 failed",
        "  rewrites  lift-branch 2, annotate 3",
        "  verdicts  2 verified, 2 rejected, 1 unverified",
        "  slowest   b.py:B 9.5s; a.py:A 4.0s",
        # Alike reasons count together whatever name and configuration they mention.
        "  rejected  2x re-script: RuntimeError: '...' object has no attribute '...'",
    ]


def test_report_round_trips_through_json() -> None:
    result = _run_result()
    again = RunResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.to_json() == result.to_json()
    assert again.summary_table() == result.summary_table()


def test_report_command_summarises_a_past_run(tmp_path: Path) -> None:
    zoo = _zoo(tmp_path, 4)
    report = tmp_path / "migration.json"
    runner = CliRunner()
    applied = runner.invoke(cli_main, ["apply", "--rule", "lift-branch", "--no-verify",
                                       "--dry-run", "--report", str(report), str(zoo)])
    assert applied.exit_code == 3, applied.output      # broken.py failed to parse

    shown = runner.invoke(cli_main, ["report", str(report)])

    assert shown.exit_code == 3
    assert "rules lift-branch; dry run, not validated" in shown.output
    assert "broken.py:2:4: cannot parse" in shown.output
    assert "  files     7 scanned, 4 changed, 2 unchanged, 1 failed" in shown.output
    assert "  rewrites  lift-branch 4" in shown.output
    assert shown.output.rstrip().endswith(
        "4 files would be changed, 2 unchanged, 1 failed; 4 class rewrites: 0 verified, "
        "0 rejected, 4 unverified.")


def test_report_command_rejects_other_json(tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"files": []}')
    shown = CliRunner().invoke(cli_main, ["report", str(other)])
    assert shown.exit_code == 2
    assert f"error: {other}: not a tsfix report (KeyError" in shown.output


# ---- pre-commit ----------------------------------------------------------------------------------

def _hooks() -> dict[str, str]:
    """id -> entry of the repository's .pre-commit-hooks.yaml (a flat list of mappings)."""
    text = (Path(__file__).resolve().parent.parent / ".pre-commit-hooks.yaml").read_text()
    hooks: dict[str, str] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("- id:"):
            current = line.split(":", 1)[1].strip()
        elif line.strip().startswith("entry:"):
            hooks[current] = line.split(":", 1)[1].strip()
    return hooks


def test_pre_commit_hooks_run_check_on_the_given_files(tmp_path: Path) -> None:
    """pre-commit appends the staged file names to the entry: a model with a fixable
    blocker fails the hook, a clean one passes, and nothing is written."""
    hooks = _hooks()
    assert set(hooks) == {"tsfix-check", "tsfix-check-static"}
    zoo = _zoo(tmp_path, 1)
    blocked = zoo / "family0" / "model_00.py"
    before = blocked.read_text()
    for entry in hooks.values():
        program, *arguments = entry.split()
        assert program == "tsfix"
        runner = CliRunner()
        failing = runner.invoke(cli_main, [*arguments, str(blocked)])
        passing = runner.invoke(cli_main, [*arguments, str(zoo / "plain.py")])
        assert (failing.exit_code, passing.exit_code) == (1, 0), (entry, failing.output)
    assert blocked.read_text() == before
