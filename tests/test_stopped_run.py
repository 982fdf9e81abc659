"""A run stopped by its time limit (or a signal) keeps the files it decided, leaves the others
as they were, and the next run resumes from the cache; and what the run says about models
under ``--target export`` says export, not script (issue 25, items 4 and 5)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import CLEAN_SOURCE, TWO_CONFIGS, Project, model_source
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
from tsfix.codemods.validation.pool import WorkerPool

MODEL = model_source()                      # lift-branch lifts use_act


# Seconds the runs below are given: past the first rewrite (LibCST and the rules are imported
# first, below, as a loaded machine took over a second for that), short of the slow phase.
LIMIT = 3


def _slow_final_texts(monkeypatch: pytest.MonkeyPatch, seconds: float) -> Any:
    """The phase after validation takes ``seconds`` (a zoo's validation, in a test); returns
    the phase as it was."""
    from tsfix.codemods.rules.registry import select_rules

    select_rules(["lift-branch"])
    real = phases.finals.final_texts

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(seconds)
        return real(*args, **kwargs)

    monkeypatch.setattr(phases.finals, "final_texts", slow)
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

    monkeypatch.setattr(phases.finals, "final_texts", real)
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


def _stop_after_first_decision(monkeypatch: pytest.MonkeyPatch) -> list[set[int]]:
    """Ctrl-C right after the first files were decided (and written); returns the indexes
    told, one set per decision."""
    real = phases._Decisions.tell
    told: list[set[int]] = []

    def stop(self: phases._Decisions, files: Any, **how: Any) -> None:
        before = set(self.told)
        real(self, files, **how)
        if self.told - before:
            told.append(self.told - before)
            raise KeyboardInterrupt

    monkeypatch.setattr(phases._Decisions, "tell", stop)
    return told


@pytest.mark.slow
def test_a_file_is_decided_while_models_that_do_not_reach_it_still_run(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """The observe round says which files each model imports: a.py's classes are judged only
    by a.py's model, so a.py is decided and written as soon as that model answered, while
    b.py's model runs (one worker: in that order). Before, nothing was decided until every
    model had answered, and a stop there kept nothing."""
    project.pyproject({"a.py:Net": TWO_CONFIGS, "b.py:Other": TWO_CONFIGS})
    project.write("a.py", MODEL)
    project.write("b.py", model_source("Other"))
    b_before = project.bytes("b.py")
    told = _stop_after_first_decision(monkeypatch)
    jobs: list[str] = []
    real_models = WorkerPool.models

    def counting(self: WorkerPool, batch: list[Any], *args: Any, **kwargs: Any) -> Any:
        jobs.extend(job.mode for job in batch)
        return real_models(self, batch, *args, **kwargs)

    monkeypatch.setattr(WorkerPool, "models", counting)

    with pytest.raises(Interrupted) as stopped:
        # sum-tensors needs the observe round, which names each model's files.
        project.run(rules=["lift-branch", "sum-tensors"], jobs=1)

    assert jobs == ["observe", "observe", "validate", "validate"]   # one round of each
    assert told == [{0}]                # a.py alone (files are indexed in discovery order)
    assert stopped.value.written == ("a.py",)
    assert stopped.value.undecided == ("b.py",)
    assert "use_act: Optional[bool] = None" in project.bytes("a.py").decode()
    assert project.bytes("b.py") == b_before


@pytest.mark.slow
def test_an_early_decision_is_the_one_the_run_ends_with(project: Project) -> None:
    """A file decided while models run gets the outcome the end of the run reports (same
    verdicts, same text), whether or not it was decided early."""
    project.pyproject({"a.py:Net": TWO_CONFIGS, "b.py:Other": TWO_CONFIGS})
    project.write("a.py", MODEL)
    project.write("b.py", model_source("Other"))
    decided: dict[int, Any] = {}
    real = phases._decide_early

    def recording(item: Any, check: Any, session: Any, *args: Any) -> None:
        decided[item.index] = check
        real(item, check, session, *args)

    import unittest.mock

    with unittest.mock.patch.object(phases, "_decide_early", recording):
        result = project.run(rules=["lift-branch", "sum-tensors"], jobs=1, mode="diff")

    assert set(decided) == {0, 1}
    for index, check in decided.items():
        [c] = result.files[index].classes
        assert check.verdicts[c.class_name].verdict == c.verdict == "verified"
        assert result.files[index].status == "changed"


def test_a_stop_inside_a_write_waits_for_the_write_with_other_threads_running() -> None:
    """With another thread alive (the validation pool's drivers while models run), a signal
    the main thread blocked went to that thread and Python raised it in the main thread
    inside the block anyway: a file written but not listed as written. Now it is raised as
    the block ends."""
    import os
    import signal
    import threading

    from tsfix.codemods.pipeline.sources import interrupts_deferred

    release = threading.Event()
    threading.Thread(target=release.wait, daemon=True).start()
    finished = False
    try:
        with pytest.raises(KeyboardInterrupt), interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:      # bytecode: where handlers run
                pass
            finished = True
    finally:
        release.set()
    assert finished


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


# ---- export: the original judged as the rewrite is --------------------------------------------

NAMED_OUTPUT = '''\
import collections

import torch
import torch.nn as nn

Out = collections.namedtuple("Out", ["y", "z"])


class Net(nn.Module):
    def __init__(self, named=False):
        super().__init__()
        self.named = named

    def forward(self, x):
        y = torch.relu(x)
        if self.named:
            return Out(y, x)
        return y
'''
# torch 2.13 exports a program returning a namedtuple, and torch.export.save refuses it
# (NotImplementedError: Can't serialize TreeSpec of namedtuple class ...): measured.
SAVES_NOT = "Can't serialize TreeSpec of namedtuple"


@pytest.mark.slow
def test_an_original_whose_program_cannot_be_saved_did_not_export_before(
        project: Project) -> None:
    """The rewrite is judged on export and save/load: so is the original. Its program
    exports and cannot be saved: 'did not export before tsfix', not a new failure."""
    project.pyproject({"net.py:Net": {"init": [{"named": True}], "inputs": ["randn(2, 4)"]}},
                      settings='target = "export"')
    project.write("net.py", NAMED_OUTPUT)

    result = project.run(rules=["lift-branch"], mode="diff")

    [model] = result.models()
    assert model.status == "fails" and SAVES_NOT in model.reason
    assert model.scripted_before is False
    assert "(did not export before tsfix)" in model.line()


@pytest.mark.slow
def test_a_model_whose_files_the_run_did_not_change_is_not_newly_failing(
        project: Project) -> None:
    """No file the model imports was changed: whatever the model check finds, the original
    has it too. Its first configuration exports and saves (what the original's own check
    tries); the second's program cannot be saved."""
    project.pyproject({"net.py:Net": {"init": [{"named": False}, {"named": True}],
                                      "inputs": ["randn(2, 4)"]}},
                      settings='target = "export"')
    project.write("net.py", NAMED_OUTPUT)

    # typeerror-fallback finds nothing to change here.
    result = project.run(rules=["typeerror-fallback"], mode="diff")

    assert [f.status for f in result.files] == ["unchanged"]
    [model] = result.models()
    assert model.status == "fails" and SAVES_NOT in model.reason
    assert model.scripted_before is False
    assert "exported before tsfix" not in model.line()


@pytest.mark.slow
def test_sigterm_to_a_real_run_keeps_the_decided_file_and_says_so(project: Project) -> None:
    """``tsfix apply`` with real validation, stopped by SIGTERM (a batch system's limit) once
    a.py is written, while b.py's model is still being checked (its constructor is slow):
    exit 130, a.py whole, b.py and everything else byte for byte as it was, and the message
    names both."""
    import os
    import signal
    import subprocess
    import sys

    project.pyproject({"a.py:Net": TWO_CONFIGS, "b.py:Other": TWO_CONFIGS})
    project.write("a.py", MODEL)
    project.write("b.py", model_source("Other", header=["import time"],
                                       init_lines=["time.sleep(3)"]))
    before = project.snapshot()
    process = subprocess.Popen(
        [sys.executable, "-m", "tsfix.cli.main", "apply", "--rule", "lift-branch",
         "--rule", "sum-tensors", "-j", "1", "--no-cache", "."],
        cwd=project.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while (project.bytes("a.py") == before["a.py"][0] and process.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert process.poll() is None, process.communicate()
        os.kill(process.pid, signal.SIGTERM)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    assert process.returncode == 130, stderr
    assert stderr.endswith(
        "interrupted: stopped after rewriting 1 file; every other file is as it was:\n"
        "  rewrote a.py\n"
        "1 file not decided (a next run does them):\n  b.py\n"), stderr
    assert "Traceback" not in stderr
    written = project.bytes("a.py").decode()
    assert "use_act: Optional[bool] = None" in written and written.endswith("return x\n")
    after = project.snapshot()
    assert {name: data for name, data in after.items() if name != "a.py"} == {
        name: data for name, data in before.items() if name != "a.py"}
