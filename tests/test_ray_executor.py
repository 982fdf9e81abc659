"""``--executor ray``: validation jobs as Ray tasks give what the local pool gives.

The slow tests start one local Ray head for the module (2 CPUs, no dashboard, the node on the
loopback address) and run ``tsfix apply`` in a subprocess connected to it (``--ray-address``),
as a user's run reaches a cluster; each comparison runs the same input through the local pool
too. Without the ray extra, ``--executor ray`` is a usage error naming it (not slow).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TWO_CONFIGS, Project, copy_fixture, model_source, pyproject_text

MODEL = model_source()

# The Ray node (and every driver the tests start) on the loopback address: Ray's own switch
# for a cluster of one machine.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}

CRASHES = {
    "hang": (["import time"], "time.sleep(600)"),
    "abort": (["import os"], "os.abort()"),
    "segv": (["import ctypes"], "ctypes.string_at(0)"),
    "exit": (["import os"], "os._exit(3)"),
}


def tsfix(*args: str, cwd: Path, env: dict[str, str] | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tsfix.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env={**os.environ, **LOOPBACK, **(env or {})})


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.name != "report.json"}


# ---- without the extra -------------------------------------------------------------------------

WITHOUT_RAY = ("import runpy, sys; sys.modules['ray'] = None; sys.argv[0] = 'tsfix'; "
               "runpy.run_module('tsfix.cli.main', run_name='__main__')")


@pytest.mark.parametrize("how", ["option", "configuration"])
def test_ray_executor_without_ray_is_a_usage_error(project: Project, how: str) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS},
                      settings='executor = "ray"' if how == "configuration" else "")
    project.write("model.py", MODEL)
    before = project.snapshot()
    args = ["apply", "--rule", "lift-branch", *(["--executor", "ray"] if how == "option"
                                                else []), "."]
    done = subprocess.run([sys.executable, "-c", WITHOUT_RAY, *args], cwd=project.root,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert 'pip install "tsfix[ray]"' in done.stderr and "Traceback" not in done.stderr
    assert project.snapshot() == before


def test_an_address_nothing_answers_at_is_a_usage_error(project: Project) -> None:
    """Ray itself would retry for minutes: exit 2 at once, nothing written."""
    pytest.importorskip("ray")
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", MODEL)
    before = project.snapshot()
    done = tsfix("apply", "--rule", "lift-branch", "--executor", "ray", "--ray-address",
                 "127.0.0.1:1", ".", cwd=project.root, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "error: cannot reach Ray at 127.0.0.1:1: " in done.stderr, done.stderr
    assert project.snapshot() == before


def test_shipped_tree_paths_are_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node without the project at its path runs the job against Ray's copy (its working
    folder), the paths in the job and in the answer mapped both ways."""
    from tsfix.codemods.validation import ray_executor

    here = tmp_path / "copy"
    here.mkdir()
    monkeypatch.chdir(here)
    job = json.dumps({"path": "/nowhere/project/m.py", "sys_path": ["/nowhere/project"]})
    assert ray_executor._shipped_root("/nowhere/project") == str(here)
    assert ray_executor._shipped_root(str(tmp_path)) is None       # the node has it
    moved = ray_executor._moved(job, "/nowhere/project", str(here))
    assert json.loads(moved) == {"path": f"{here}/m.py", "sys_path": [str(here)]}
    assert ray_executor._moved(moved, str(here), "/nowhere/project") == job


# ---- on a local Ray head -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """One local Ray head for the module: its address."""
    for name, value in LOOPBACK.items():
        os.environ[name] = value
    ray = pytest.importorskip("ray")
    import logging

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             logging_level=logging.ERROR, log_to_driver=False)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()
        for name in LOOPBACK:
            os.environ.pop(name, None)


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report without durations."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if not k.endswith("_s")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return dict(strip(report))


PROGRESS = re.compile(r"^[a-z][a-z ,-]* \d+/\d+ ")


def _verdict_lines(stderr: str) -> list[str]:
    """What a run says, less its timings (the summary's slowest classes, the progress lines
    printed every few seconds)."""
    lines, timing = [], False
    for line in stderr.splitlines():
        if PROGRESS.match(line):
            continue
        if line.lstrip().startswith("time "):
            continue                # the summary's seconds per phase
        if line.lstrip().startswith("slowest"):
            timing = True
        elif timing and line.startswith("    "):
            continue
        else:
            timing = False
            lines.append(line)
    return lines


def _both(folder: Path, address: str, *args: str) -> tuple[subprocess.CompletedProcess[str],
                                                            subprocess.CompletedProcess[str],
                                                            dict[str, Any], dict[str, Any]]:
    """The same dry run through the local pool and through Ray (-j 2 each)."""
    runs, reports = [], []
    for executor in (["--executor", "local"], ["--executor", "ray", "--ray-address", address]):
        report = folder.parent / "report.json"
        report.unlink(missing_ok=True)
        runs.append(tsfix("apply", "--dry-run", "--no-cache", "-j", "2", *executor, *args,
                          "--report", str(report), str(folder), cwd=folder.parent))
        reports.append(json.loads(report.read_text()))
    return runs[0], runs[1], reports[0], reports[1]


@pytest.mark.slow
def test_fixtures_give_the_same_verdicts_and_report(tmp_path: Path, ray_head: str) -> None:
    """Verified, rejected and rule-drop verdicts and configured models: the same lines, the
    same JSON records (durations aside), the same exit code."""
    root = tmp_path / "fixtures"
    root.mkdir()
    folder = copy_fixture(root, "rules-together", inputs_only=True)
    local, ray, local_report, ray_report = _both(folder, ray_head)
    assert "Traceback" not in ray.stderr
    assert ray.returncode == local.returncode
    assert ray.stdout == local.stdout
    assert _verdict_lines(ray.stderr) == _verdict_lines(local.stderr)
    assert _comparable(ray_report) == _comparable(local_report)
    verdicts = {c["verdict"] for f in ray_report["files"] for c in f["classes"]}
    assert "verified" in verdicts and len(verdicts) > 1, verdicts


@pytest.mark.slow
def test_crashing_and_hanging_jobs_cost_only_themselves(tmp_path: Path, ray_head: str) -> None:
    """A model that hangs (the job's timeout), aborts, segfaults or calls os._exit: that job's
    classes are unverified with the local pool's own wording; the good model is verified."""
    folder = tmp_path / "zoo"
    (folder / ".git").mkdir(parents=True)
    (folder / "pyproject.toml").write_text(pyproject_text(
        {f"{name}.py:Net": TWO_CONFIGS for name in [*CRASHES, "good"]}))
    for name, (header, line) in CRASHES.items():
        (folder / f"{name}.py").write_text(model_source(header=header, forward_lines=[line]))
    (folder / "good.py").write_text(MODEL)
    local, ray, local_report, ray_report = _both(folder, ray_head, "--rule", "lift-branch",
                                                 "--timeout", "5", "-v")
    assert "Traceback" not in ray.stderr
    assert ray.returncode == local.returncode
    assert _verdict_lines(ray.stderr) == _verdict_lines(local.stderr)
    assert _comparable(ray_report) == _comparable(local_report)
    reasons = {f["path"].rsplit("/", 1)[-1]: f["classes"][0]["reason"]
               for f in ray_report["files"] if f["classes"]}
    assert "validation timed out after 5s" in reasons["hang.py"], reasons
    assert "SIGABRT" in reasons["abort.py"] and "SIGSEGV" in reasons["segv.py"], reasons
    assert "exit code 3" in reasons["exit.py"], reasons
    good = next(c for f in ray_report["files"] for c in f["classes"]
                if f["path"].endswith("good.py"))
    assert good["verdict"] == "verified", good


def _worker_processes() -> set[int]:
    """Validation worker subprocesses of Ray tasks (their parent is a Ray worker)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            parent_args = Path(f"/proc/{parent}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if b"tsfix.codemods.validation.worker" in args and parent_args.startswith(b"ray::"):
            found.add(int(proc.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_ctrl_c_cancels_the_tasks_and_writes_nothing(tmp_path: Path, ray_head: str) -> None:
    """Ctrl-C while a Ray task runs a model that hangs: exit 130, the local pool's message,
    nothing written, and the task's worker subprocess gone."""
    zoo = tmp_path / "zoo"
    (zoo / ".git").mkdir(parents=True)
    examples = {}
    for i in range(3):
        (zoo / f"model_{i:02d}.py").write_text(model_source(f"Net{i}", flag=f"use_{i}"))
    (zoo / "hang.py").write_text(model_source(header=["import time"],
                                              forward_lines=["time.sleep(600)"]))
    examples["hang.py:Net"] = TWO_CONFIGS
    (zoo / "pyproject.toml").write_text(pyproject_text(examples))
    before = snapshot(zoo)
    process = subprocess.Popen(
        [sys.executable, "-m", "tsfix.cli.main", "apply", "--rule", "lift-branch", "-j", "2",
         "--no-cache", "--executor", "ray", "--ray-address", ray_head, "."],
        cwd=zoo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, start_new_session=True, env={**os.environ, **LOOPBACK})
    deadline = time.monotonic() + 120
    while not _worker_processes() and process.poll() is None:
        assert time.monotonic() < deadline, "no Ray task started"
        time.sleep(0.1)
    time.sleep(4)                   # the hanging model's job is running by now
    running = _worker_processes()
    assert running
    os.killpg(process.pid, signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr.endswith("interrupted: stopped before anything was written; every file is "
                           "as it was\n"), stderr
    assert "Traceback" not in stderr and stdout == ""
    assert snapshot(zoo) == before
    assert not list(zoo.rglob("*.tsfix"))
    deadline = time.monotonic() + 30
    while _worker_processes() & running:
        assert time.monotonic() < deadline, "a cancelled task's worker is still running"
        time.sleep(0.2)


SHIPPING_DRIVER = """
import json, logging, sys
import ray
from tsfix.codemods.validation.ray_executor import run_one
ray.init(address=sys.argv[1], runtime_env={"working_dir": sys.argv[2]},
         logging_level=logging.ERROR, log_to_driver=False)
task = ray.remote(num_cpus=1, max_retries=0)(run_one)
print(json.dumps(ray.get(task.remote(sys.argv[3], 60.0, 1, sys.argv[4]))))
"""


@pytest.mark.slow
def test_a_node_without_the_project_runs_the_job_on_the_shipped_copy(tmp_path: Path,
                                                                     ray_head: str) -> None:
    """The project reaches a node that does not have it at its path as Ray's working_dir:
    the job's files, and the unchanged files they import, are found in that copy, and the
    answer names the paths the driver knows."""
    from tsfix.codemods.pipeline.config import parse_example
    from tsfix.codemods.validation.protocol import (
        ObservationResult,
        ObserveClass,
        ObserveJob,
        encode,
        result_from_json,
    )

    project = tmp_path / "project"
    project.mkdir()
    (project / "helper.py").write_text("def scale(x):\n    return x * 2\n")
    (project / "net.py").write_text(
        "import torch.nn as nn\nfrom helper import scale\n\n\nclass Net(nn.Module):\n"
        "    def forward(self, x):\n        return scale(x)\n\n\nclass Broken(nn.Module):\n"
        "    def forward(self, x):\n        raise ValueError(__file__)\n")
    elsewhere = "/nowhere/tsfix-test-project"          # the driver's path, not on this node
    example = parse_example("net.py:Net", {"inputs": ["randn(2, 3)"]}).to_example()
    job = ObserveJob(1, f"{elsewhere}/net.py", (ObserveClass("Net", example),
                                               ObserveClass("Broken", example)), (elsewhere,))
    # A driver of its own: Ray ships a folder only for a whole job (ray.init).
    done = subprocess.run([sys.executable, "-c", SHIPPING_DRIVER, ray_head, str(project),
                           encode(job), elsewhere], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **LOOPBACK})
    assert done.returncode == 0, done.stderr
    kind, text = json.loads(done.stdout)
    assert kind == "result", text
    answer = result_from_json(json.loads(text))
    assert isinstance(answer, ObservationResult)
    assert answer.observed["Net"]["forward"]["x"] == "Tensor", answer
    # The failure names the file where the driver has it.
    assert f"{elsewhere}/net.py" in answer.failures["Broken"], answer.failures


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")
def test_the_time_limit_stops_a_ray_run_as_a_local_one(tmp_path: Path, ray_head: str) -> None:
    """--timeout-total while a Ray task runs a model that hangs: exit 3 (not Ctrl-C's 130:
    Ray's waits would turn the time limit into a plain KeyboardInterrupt), the time limit's
    message, and the task's worker subprocess gone."""
    zoo = tmp_path / "zoo"
    (zoo / ".git").mkdir(parents=True)
    (zoo / "hang.py").write_text(model_source(header=["import time"],
                                              forward_lines=["time.sleep(600)"]))
    (zoo / "pyproject.toml").write_text(pyproject_text({"hang.py:Net": TWO_CONFIGS}))
    before = snapshot(zoo)
    done = tsfix("apply", "--rule", "lift-branch", "-j", "2", "--no-cache", "--executor", "ray",
                 "--ray-address", ray_head, "--timeout-total", "15", ".", cwd=zoo)
    assert done.returncode == 3, done.stderr
    assert "time limit reached (--timeout-total 15s)" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert snapshot(zoo) == before
    deadline = time.monotonic() + 30
    while _worker_processes():
        assert time.monotonic() < deadline, "a cancelled task's worker is still running"
        time.sleep(0.2)
