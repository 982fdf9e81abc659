"""Whole-zoo runs: the rewrite phase in several processes gives what one process gives; the
summary table and ``tsfix report``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import libcst as cst
import pytest
from click.testing import CliRunner
from conftest import TWO_CONFIGS, Project, model_source, pyproject_text
from tsfix.cli.main import main as cli_main
from tsfix.codemods.pipeline import phases
from tsfix.codemods.pipeline.config import Config
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.phases.processes import (
    PARALLEL_MIN_FILES,
    PARALLEL_MIN_SECONDS,
    Rewriters,
)
from tsfix.codemods.pipeline.report import ClassResult, FileResult, RunResult, SkipResult
from tsfix.codemods.rules.base import ClassChange, Rule
from tsfix.codemods.validation.pool import WorkerPool


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
    return {**{key: value for key, value in data.items()
               if key not in ("rewrite_processes", "phase_s")}, "files": files}


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


def test_a_few_large_files_are_rewritten_in_processes(tmp_path: Path) -> None:
    """Below PARALLEL_MIN_FILES files, their size decides: a round of a few large files
    (ParityBench's 6,000-line file among 20) is worth the processes; small ones stay here;
    the report keeps discovery order."""
    from tsfix.codemods.pipeline.phases.rewriting import SOURCE_BYTES_PER_SECOND

    big = tmp_path / "big"
    big.mkdir()
    padding = "# " + "x" * 78 + "\n"
    lines = int(PARALLEL_MIN_SECONDS * SOURCE_BYTES_PER_SECOND) // len(padding) // 2 + 1
    for i in range(3):
        (big / f"model_{i}.py").write_text(model_source(f"Net{i}", flag=f"use_{i}")
                                           + padding * (lines if i < 2 else 0))
    small = _zoo(tmp_path, 3)
    options = {"rules": ["lift-branch"], "verify": False, "mode": "diff", "jobs": 2}
    large_round = run([big], Options(**options))
    assert large_round.rewrite_processes >= 1
    assert [f.status for f in large_round.files] == ["changed"] * 3
    assert [f.path for f in large_round.files] == sorted(f.path for f in large_round.files)
    assert run([small], Options(**options)).rewrite_processes == 0


def test_api_script_without_main_guard_still_rewrites_everything(tmp_path: Path) -> None:
    # spawn re-runs a script that calls run() at top level, so its rewrite processes die while
    # starting; the engine then does the work in the calling process instead of failing.
    zoo = _zoo(tmp_path, PARALLEL_MIN_FILES + 2)
    script = tmp_path / "migrate.py"
    script.write_text(
        "import json, sys\n"
        "from tsfix.codemods.pipeline.engine import Options, run\n"
        f"result = run([{str(zoo)!r}], Options(rules=['lift-branch'], verify=False, "
        "mode='diff', jobs=2))\n"
        "print(json.dumps({'changed': sum(f.status == 'changed' for f in result.files), "
        "'processes': result.rewrite_processes}))\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"changed": PARALLEL_MIN_FILES + 2,
                                                        "processes": 0}


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
                   skips=[SkipResult("annotate", "E", 4, "cannot type x")]),
    ]
    return RunResult(files, ["lift-branch", "annotate"], "diff", True, False,
                     phase_s={"rewrite": 0.01, "validate": 14.5, "trials": 2.04},
                     phase_items={"rewrite": 5, "validate": 4, "trials": 2})


def test_summary_table_counts_rules_verdicts_slowest_and_reasons() -> None:
    table = _run_result().summary_table(top=2)
    assert table == [
        "  files     5 scanned, 1 changed, 1 unchanged, 1 failed",
        "  rewrites  lift-branch 2, annotate 3",
        "  verdicts  2 verified, 2 rejected, 1 unverified",
        # Phases that took next to nothing are left out.
        "  time      validate 14.5s, trials 2.0s",
        "  slowest      9.5s  b.py:B",
        "               4.0s  a.py:A",
        # Alike reasons count together whatever name and configuration they mention.
        "  rejected  2x re-script: RuntimeError: '...' object has no attribute '...'",
    ]


def test_report_round_trips_through_json() -> None:
    result = _run_result()
    again = RunResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again.to_json() == result.to_json()
    assert again.phase_items == {"rewrite": 5, "validate": 4, "trials": 2}
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
    assert "broken.py:1:23: cannot parse: invalid syntax" in shown.output
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


@pytest.mark.slow
def test_pre_commit_hooks_run_check_on_the_given_files(tmp_path: Path) -> None:
    """pre-commit appends the staged file names to the entry: a model with a fixable
    blocker fails the hook, a clean one passes, and nothing is written."""
    hooks = _hooks()
    assert set(hooks) == {"tsfix-check", "tsfix-check-static"}
    zoo = _zoo(tmp_path, 1)
    # With validation, the lifted branch is a change only where an example proves it.
    (zoo / "pyproject.toml").write_text(pyproject_text(
        {"family0/model_00.py:Net0": {"init": [{"use_0": True}, {"use_0": False}],
                                      "inputs": ["randn(2, 4)"]}}))
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


# ---- the cache -----------------------------------------------------------------------------------

class CountingRewrites:
    """Counts rewrite_source calls in this process (runs of few files rewrite here)."""

    def __init__(self, monkeypatch: Any) -> None:
        import tsfix.codemods.pipeline.rewrite as rewrite

        self.calls = 0
        real = rewrite.rewrite_source

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(rewrite, "rewrite_source", counting)


def _cached_run(zoo: Path, mode: str = "diff", **options: Any) -> RunResult:
    return run([zoo], Options(rules=["lift-branch"], verify=False, mode=mode,  # type: ignore[arg-type]
                              cache=True, jobs=1, **options))


def test_second_run_over_unchanged_files_parses_nothing(tmp_path: Path, monkeypatch: Any
                                                         ) -> None:
    zoo = _zoo(tmp_path, 3)
    counter = CountingRewrites(monkeypatch)

    first = _cached_run(zoo)
    rewrites_first = counter.calls
    second = _cached_run(zoo)

    assert first.cache_hits == 0 and rewrites_first == 5      # 3 models, plain, broken
    # broken.py failed to parse: that outcome is cached too, utils.py was skipped.
    assert second.cache_hits == 6
    assert counter.calls == rewrites_first                     # nothing rewritten again
    assert _comparable(second.to_json())["files"] == [
        {**f, "cached": True} for f in _comparable(first.to_json())["files"]]
    assert second.exit_code == first.exit_code == 3


def test_cache_misses_when_content_rules_or_examples_change(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    zoo = _zoo(tmp_path, 2)
    _cached_run(zoo)
    model = zoo / "family0" / "model_00.py"
    model.write_text(model.read_text() + "\n# edited\n")
    assert _cached_run(zoo).cache_hits == 4                    # only the edited file misses
    assert _cached_run(zoo, unsafe_fixes=True).cache_hits == 0  # other settings: other keys
    (zoo / "pyproject.toml").write_text(
        '[tool.tsfix.examples."family1/model_01.py:Net1"]\ninputs = ["randn(2, 4)"]\n')
    # Only the file that now has examples misses.
    assert _cached_run(zoo, config=zoo / "pyproject.toml").cache_hits == 4


def test_write_after_dry_run_writes_the_cached_rewrite(tmp_path: Path, monkeypatch: Any
                                                       ) -> None:
    zoo = _zoo(tmp_path, 2)
    _cached_run(zoo)
    counter = CountingRewrites(monkeypatch)

    written = _cached_run(zoo, mode="write")

    assert counter.calls == 0 and written.cache_hits == 5
    model = zoo / "family0" / "model_00.py"
    assert "use_0: Optional[bool] = None" in model.read_text()
    assert [f.display for f in written.files if f.written] == [
        f.display for f in written.files if f.status == "changed"]
    # The written files are new content: the next run parses them, finds nothing to do.
    again = _cached_run(zoo)
    assert counter.calls == 2
    assert {f.status for f in again.files} == {"unchanged", "skipped", "failed"}


def test_no_cache_flag_bypasses_it(tmp_path: Path) -> None:
    zoo = _zoo(tmp_path, 2)
    runner = CliRunner()
    arguments = ["apply", "--rule", "lift-branch", "--no-verify", "--check", "-v"]
    runner.invoke(cli_main, [*arguments, str(zoo)])
    report = tmp_path / "r.json"
    cached = runner.invoke(cli_main, [*arguments, "--report", str(report), str(zoo)])
    assert json.loads(report.read_text())["cache_hits"] == 5, cached.output
    runner.invoke(cli_main, [*arguments, "--no-cache", "--report", str(report), str(zoo)])
    assert json.loads(report.read_text())["cache_hits"] == 0


@pytest.mark.slow
def test_cached_verdicts_skip_observation_and_validation(project: Project,
                                                         monkeypatch: Any) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", model_source())
    rounds: list[str] = []
    for name in ("validate", "observe", "models"):
        real = getattr(WorkerPool, name)

        def counting(self: WorkerPool, jobs: list[Any], *args: Any, _name: str = name,
                     _real: Any = real, **kwargs: Any) -> Any:
            rounds.extend([f"{_name} {getattr(job, 'mode', '')}".strip() for job in jobs])
            return _real(self, jobs, *args, **kwargs)

        monkeypatch.setattr(WorkerPool, name, counting)

    first = project.run(mode="diff", cache=True, rules=["all"])
    jobs_first = list(rounds)
    second = project.run(mode="diff", cache=True, rules=["all"])

    # The configured model observed, the class validated, the model's run (its verdict is
    # final: nothing was held back, so it is not scripted a second time).
    assert jobs_first == ["models observe", "validate", "models validate"]
    assert rounds == jobs_first                       # the second run started no job
    assert second.cache_hits == 1
    [c] = second.classes()
    assert c.verdict == "verified" and c.reason == first.classes()[0].reason


def test_cache_misses_when_tsfix_itself_changes(tmp_path: Path, monkeypatch: Any) -> None:
    import tsfix.codemods.pipeline.cache as cache_module

    zoo = _zoo(tmp_path, 2)
    _cached_run(zoo)
    assert _cached_run(zoo).cache_hits == 5
    # An edited rule (a developer install, same version number) must not reuse entries.
    monkeypatch.setattr(cache_module, "code_fingerprint", lambda: "edited")
    assert _cached_run(zoo).cache_hits == 0


CACHED_RUN_PROBE = """\
import json, sys
from tsfix.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"exit": code, "loaded": sorted(
    m for m in ("libcst", "black", "torch", "tsfix.codemods.pipeline.rewrite",
                "tsfix.codemods.rules.registry") if m in sys.modules)}))
"""


def test_fully_cached_run_imports_neither_libcst_nor_black(tmp_path: Path) -> None:
    """A second run over an unchanged tree is answered from the cache without loading the
    rewrite machinery, also when it writes the rewrites an earlier dry run cached."""
    zoo = _zoo(tmp_path, 3)

    def tsfix(*arguments: str) -> dict[str, Any]:
        probe = subprocess.run([sys.executable, "-c", CACHED_RUN_PROBE, "apply", "--rule",
                                "all", "--no-verify", "-j", "1", *arguments, str(zoo)],
                               capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert probe.returncode == 0, probe.stderr
        found: dict[str, Any] = json.loads(probe.stdout.strip().splitlines()[-1])
        return found

    first = tsfix("--dry-run")
    assert "libcst" in first["loaded"] and first["exit"] == 3   # broken.py does not parse
    report = tmp_path / "report.json"
    again = tsfix("--dry-run", "--report", str(report))
    assert again == {"exit": 3, "loaded": []}
    assert json.loads(report.read_text())["cache_hits"] == 6
    written = tsfix("--report", str(report))
    assert written == {"exit": 3, "loaded": []}
    assert [f["path"] for f in json.loads(report.read_text())["files"] if f["written"]] == [
        f"zoo/family{i}/model_0{i}.py" for i in range(3)]
    assert "use_0: Optional[bool] = None" in (zoo / "family0" / "model_00.py").read_text()


# ---- rule-drop trials ----------------------------------------------------------------------------

class _Inserting(Rule):
    """Test-only: inserts ``STATEMENT`` at the start of forward() (module level, so that rewrite
    processes can unpickle it)."""

    STATEMENT = ""

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        body = list(cls.body.body)
        for i, node in enumerate(body):
            if isinstance(node, cst.FunctionDef) and node.name.value == "forward":
                added = cst.parse_statement(self.STATEMENT + "\n")
                body[i] = node.with_changes(body=node.body.with_changes(
                    body=[added, *node.body.body]))
                self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                                self.summary))
                return cls.with_changes(body=cls.body.with_changes(body=body))
        return cls


class _KeepsOutputs(_Inserting):
    name = "keeps-outputs"
    summary = "multiplies by one"
    STATEMENT = "x = x * 1.0"


class _TriplesOutputs(_Inserting):
    name = "triples-outputs"
    summary = "multiplies by three (eager parity fails)"
    STATEMENT = "x = x * 3.0"


@pytest.mark.slow
def test_rule_drop_trials_run_in_the_rewrite_processes_with_progress(
        project: Project, monkeypatch: Any) -> None:
    """A class two rules changed is rejected; its trials (each rule left out) are rewritten in
    the run's rewrite processes, then validated, each round a phase of the progress display."""
    from tsfix.codemods.pipeline.phases import processes
    from tsfix.codemods.rules import registry

    monkeypatch.setattr(registry, "ALL_RULES", {rule.name: rule
                                                for rule in (_KeepsOutputs, _TriplesOutputs)})
    monkeypatch.setattr(processes, "PARALLEL_MIN_FILES", 2)     # two files: rewrite processes
    names = ["a.py", "b.py"]
    project.pyproject({f"{name}:Net": {"inputs": ["randn(2, 4)"]} for name in names})
    for name in names:
        project.write(name, model_source(init_lines=["self.fc = nn.Linear(4, 4)"],
                                         forward_lines=["x = self.fc(x)"]))
    seen: list[Any] = []

    result = project.run(jobs=2, progress=seen.append)

    assert result.rewrite_processes >= 1
    # "models": the configured models' run, before the trials and again for their verdicts on
    # the final texts (a rule was dropped).
    phases_seen = [p.phase for p in seen]
    assert list(dict.fromkeys(phases_seen)) == ["rewrite", "validate", "models", "trials",
                                                "recheck"]
    assert phases_seen[-1] == "models"
    trials = [p for p in seen if p.phase == "trials"]
    assert (trials[0].done, trials[-1].done, trials[-1].total) == (0, 4, 4)  # 2 classes x 2
    for file in result.files:
        verdicts = {c.rule: (c.verdict, c.reason.split(":")[0]) for c in file.classes}
        assert verdicts == {"keeps-outputs": ("verified", "1 configuration(s)"),
                            "triples-outputs": ("rejected", "dropped")}, file.classes
        text = project.bytes(file.display).decode()
        assert "x = x * 1.0" in text and "x = x * 3.0" not in text


# ---- Ctrl-C --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_writes_nothing_half(tmp_path: Path) -> None:
    """SIGINT while validation runs (a model that hangs): exit 130 with one message, no
    traceback, and every file exactly as it was (writes come only after validation)."""
    import signal
    import subprocess
    import sys
    import time

    zoo = _zoo(tmp_path, 3)
    (zoo / "broken.py").unlink()
    hanging = zoo / "family0" / "model_00.py"
    hanging.write_text(model_source("Net0", flag="use_0", header=["import time"],
                                    init_lines=["self.fc = nn.Linear(4, 4)"],
                                    forward_lines=["time.sleep(60)", "x = self.fc(x)"]))
    before = {p: p.read_bytes() for p in zoo.rglob("*.py")}
    process = subprocess.Popen([sys.executable, "-m", "tsfix.cli.main", "apply", "--rule",
                                "lift-branch", "-j", "1", str(zoo)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4)       # the worker has started and sits in the sleeping forward
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert stderr == ("interrupted: stopped before anything was written; every file is as it "
                      "was\n")
    assert {p: p.read_bytes() for p in zoo.rglob("*.py")} == before
    assert not list(zoo.rglob("*.tsfix"))       # no temporary file left behind


def _where(item: int, settings: object) -> tuple[int, int]:
    """A rewrite-process task for the test below: the item and the process that took it."""
    return item, os.getpid()


def test_a_short_round_of_slow_files_is_spread_over_the_processes() -> None:
    # Rule-drop trials of a few large files: the first round's times say the round is worth
    # the processes; a few quick ones stay here.
    session = phases.Session(["lift-branch"], Config(), False, False, workers=2)
    done: list[tuple[int, int]] = []
    with Rewriters(session) as rewriters:
        quick = rewriters.map(_where, [1, 2, 3], done.append)
        slow = rewriters.map(_where, [4, 5, 6, 7], done.append,
                             seconds=PARALLEL_MIN_SECONDS)
    assert {pid for _, pid in quick} == {os.getpid()}
    assert sorted(item for item, _ in slow) == [4, 5, 6, 7]
    assert os.getpid() not in {pid for _, pid in slow}
    assert sorted(done) == sorted(quick + slow)


def _where_slowly(item: int, settings: object) -> tuple[int, int]:
    """As _where, slow enough that both processes take tasks."""
    time.sleep(0.05)
    return item, os.getpid()


def test_items_asked_together_go_to_one_process() -> None:
    """Rule-drop trials of one file go to one process in turn: each rewrite starts where the
    last left off there (rewrite.STEPS)."""
    session = phases.Session(["lift-branch"], Config(), False, False, workers=2)
    items = list(range(16))
    with Rewriters(session) as rewriters:
        found = rewriters.map(_where_slowly, items, lambda _: None,
                              seconds=PARALLEL_MIN_SECONDS, together=lambda item: item % 2)
    assert sorted(item for item, _ in found) == items
    for parity in (0, 1):
        assert len({pid for item, pid in found if item % 2 == parity}) == 1
