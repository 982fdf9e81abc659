"""A run stopped by its time limit (or a signal) keeps the files it decided, leaves the others
as they were, and the next run resumes from the cache; and what the run says about models
under ``--target export`` says export, not script (issue 25, items 4 and 5)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import CLEAN_SOURCE, Project, model_source
from tsfix.cli.progress import describe
from tsfix.codemods.pipeline import phases
from tsfix.codemods.pipeline.config import ConfigError, load_config
from tsfix.codemods.pipeline.report import (
    FileResult,
    Interrupted,
    ModelRecord,
    Progress,
    RunResult,
)

MODEL = model_source()                      # lift-branch lifts use_act


# Seconds the runs below are given: past the first rewrite (LibCST and the rules are imported
# first, below, as a loaded machine took over a second for that), short of the slow phase.
LIMIT = 3


def _slow_final_texts(monkeypatch: pytest.MonkeyPatch, seconds: float) -> Any:
    """The phase after validation takes ``seconds`` (a zoo's validation, in a test); returns
    the phase as it was."""
    from tsfix.codemods.rules.registry import select_rules

    select_rules(["lift-branch"])
    real = phases._final_texts

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(phases, "_final_texts", slow)
    return real


def test_time_limit_keeps_decided_files_and_the_next_run_resumes(
        project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    project.pyproject()
    project.write("clean.py", CLEAN_SOURCE)         # decided once rewritten: nothing to change
    project.write("net.py", MODEL)                  # waits for its final text
    before = project.snapshot()
    real = _slow_final_texts(monkeypatch, 30)
    cache = tmp_path / "cache"

    started = time.monotonic()
    with pytest.raises(Interrupted) as stopped:
        project.run(rules=["lift-branch"], verify=False, cache=True, cache_dir=cache,
                    timeout_total=LIMIT)

    assert time.monotonic() - started < 20
    assert stopped.value.time_limit == LIMIT
    assert stopped.value.written == ()
    assert stopped.value.undecided == ("net.py",)
    assert project.snapshot() == before             # net.py has its old bytes

    monkeypatch.setattr(phases, "_final_texts", real)
    resumed = project.run(rules=["lift-branch"], verify=False, cache=True, cache_dir=cache)
    assert resumed.cache_hits == 1                  # clean.py, decided before the stop
    by_name = {f.display: f for f in resumed.files}
    assert by_name["clean.py"].cached and not by_name["net.py"].cached
    assert by_name["net.py"].written
    assert "use_act: Optional[bool] = None" in project.bytes("net.py").decode()


def test_time_limit_on_the_command_line_says_what_was_kept_and_exits_3(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    project.pyproject(settings=f"timeout-total = {LIMIT}")
    project.write("clean.py", CLEAN_SOURCE)
    project.write("net.py", MODEL)
    before = project.snapshot()
    _slow_final_texts(monkeypatch, 30)

    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", ".")

    assert result.exit_code == 3, result.output
    assert result.stderr == (
        f"time limit reached (--timeout-total {LIMIT}s): stopped before anything was rewritten\n"
        "1 file not decided, left as they were (a next run does them; what was decided "
        "comes from the cache):\n  net.py\n")
    assert project.snapshot() == before
    # The option overrides the configuration.
    assert "--timeout-total 1.5s" in project.cli(
        "apply", "--rule", "lift-branch", "--no-verify", "--timeout-total", "1.5",
        ".").stderr


def test_a_file_decided_before_the_stop_is_written(project: Project,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The files no model waits for are written as soon as their final text is known, before
    the phases after it: a stop there keeps them."""
    project.pyproject()
    project.write("a.py", MODEL)
    project.write("b.py", MODEL)
    real = phases._Decisions.tell

    def stop_after_first_decision(self: phases._Decisions, files: Any, **how: Any) -> None:
        real(self, files, **how)
        if self.told:
            raise KeyboardInterrupt         # Ctrl-C right after the decided files were written

    monkeypatch.setattr(phases._Decisions, "tell", stop_after_first_decision)
    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", ".")

    assert result.exit_code == 130, result.output
    assert result.stderr == ("interrupted: stopped after rewriting 2 files; every other file "
                             "is as it was:\n  rewrote a.py\n  rewrote b.py\n")
    assert "use_act: Optional[bool] = None" in project.bytes("b.py").decode()


def test_timeout_total_must_be_positive(project: Project) -> None:
    path = project.pyproject(settings="timeout-total = 0")
    with pytest.raises(ConfigError, match="timeout-total: expected a positive number"):
        load_config(path)
    assert load_config(project.pyproject(settings="timeout-total = 90")).timeout_total == 90


# ---- the target's own words -------------------------------------------------------------------

def test_progress_says_exporting_under_the_export_target() -> None:
    assert describe(Progress("models", 1, 2, target="export"), 1.0).startswith(
        "exporting configured models 1/2 models")
    assert describe(Progress("models", 1, 2), 1.0).startswith(
        "scripting configured models 1/2 models")


def _report(tmp_path: Path, target: str, status: str) -> Path:
    record = ModelRecord("net.py:Net", status, "the reason", scripted_before=True,
                         target=target)
    result = RunResult([FileResult(Path("net.py"), "net.py", models=[record])],
                       ["lift-branch"], "write", True, False)
    path = tmp_path / f"{target}-{status}.json"
    result.write_json(path)
    return path


def test_report_and_closing_hint_say_export_under_the_export_target(
        project: Project, tmp_path: Path) -> None:
    exported = json.loads(_report(tmp_path, "export", "scripts").read_text())
    assert exported["models"][0]["status"] == "exports"
    assert exported["files"][0]["models"][0]["status"] == "exports"
    scripted = json.loads(_report(tmp_path, "torchscript", "scripts").read_text())
    assert scripted["models"][0]["status"] == "scripts"
    # Read back, an exported model is one that works (exit 0), as it was in the run.
    again = RunResult.from_json(exported)
    assert again.models()[0].ok and again.exit_code == 0

    export_fails = project.cli("report", str(_report(tmp_path, "export", "fails")))
    assert "a configured model that does not export fails the run" in export_fails.stderr
    assert "does not script" not in export_fails.stderr
    script_fails = project.cli("report", str(_report(tmp_path, "torchscript", "fails")))
    assert "a configured model that does not script fails the run" in script_fails.stderr
