"""Bad input, as a suite of its own: what a new user's odd folder must never do to tsfix.

Every input here is generated in ``tmp_path`` (a symbolic link loop, broken encodings, file
names and contents that carry shell syntax, newlines and ANSI escape sequences, a closed
standard input, models that hang, abort, segfault or are killed as by the OOM killer, Ctrl-C in
the middle of a batch). For each: a clear message naming the file (and line), no traceback,
nothing run that was not meant to run, every file on disk either as it was or fully rewritten,
and the exit code of the table in docs/usage.md, every row of which is checked below.
"""

from __future__ import annotations

import codecs
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import (
    CLEAN_SOURCE,
    TWO_CONFIGS,
    Project,
    copy_fixture,
    model_source,
    no_traceback,
    pyproject_text,
)
from tsfix.cli import main as cli
from tsfix.codemods.pipeline import engine

MODEL = model_source()                          # class Net, line 5; lift-branch lifts use_act


def lifted(text: str) -> bool:
    return "use_act: Optional[bool] = None" in text and "if self.use_act:" not in text


def tsfix(*args: str, cwd: Path, stdin: Any = subprocess.DEVNULL,
          timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``python -m tsfix.cli.main ARGS`` in ``cwd``, as a user runs it (no terminal)."""
    return subprocess.run([sys.executable, "-m", "tsfix.cli.main", *args], cwd=cwd,
                          stdin=stdin, capture_output=True, text=True, timeout=timeout)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (links are not followed), by relative path."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink() and ".git" not in p.parts
            and "__pycache__" not in p.parts}


# ---- the bad-input folder ----------------------------------------------------------------------

INJECTED_NAMES = ["$(touch PWNED).py", "`touch PWNED`.py", "--rule=all; touch PWNED.py",
                  "new\nline.py", "\x1b[2Jclear.py", "\u202eyp.evil.py"]
INJECTED_CONTENT = MODEL.replace(
    "class Net(nn.Module):\n",
    'class Net(nn.Module):\n    """\x1b[2J $(touch PWNED) `touch PWNED`; rm -rf PWNED"""\n')


def bad_folder(root: Path) -> dict[str, str]:
    """``root/bad``: files that cannot be read as Python, files whose names and contents try
    injection, and a plain model. Returns each unreadable file's expected error line."""
    bad = root / "bad"
    bad.mkdir(parents=True)
    with_accent = MODEL.replace("import torch\n", "import torch\n# caf\xe9\n")
    (bad / "latin1.py").write_bytes(with_accent.encode("latin-1"))
    (bad / "cookie.py").write_bytes(b"# -*- coding: klingon -*-\n" + MODEL.encode())
    (bad / "bom_cookie.py").write_bytes(codecs.BOM_UTF8 + b"# coding: latin-1\n"
                                        + MODEL.encode())
    (bad / "utf16.py").write_bytes(MODEL.encode("utf-16"))
    (bad / "nul.py").write_bytes(MODEL.encode().replace(b"return x", b"return x\0"))
    (bad / "syntax.py").write_bytes(MODEL.encode().replace(b"def forward(self, x):",
                                                           b"def forward(self, x)"))
    (bad / "loop.py").symlink_to("loop.py")
    for name in INJECTED_NAMES:
        (bad / name).write_text(MODEL)
    (bad / "content.py").write_text(INJECTED_CONTENT)
    (bad / "model.py").write_text(MODEL)
    return {
        "bom_cookie.py": "error: bad/bom_cookie.py:1: the file starts with a UTF-8 byte order "
                         "mark but its coding line declares latin-1; remove one of them",
        "cookie.py": "error: bad/cookie.py:1: unknown encoding: klingon",
        "latin1.py": "error: bad/latin1.py:2: not valid utf-8: cannot decode byte 0xe9 (declare "
                     "the encoding with a '# -*- coding: ... -*-' line or save the file as "
                     "UTF-8)",
        "loop.py": "error: bad/loop.py: cannot read: symbolic link loop (bad/loop.py -> loop.py)",
        "nul.py": "error: bad/nul.py:13:17: cannot parse: a null byte (\\0) in the source",
        "syntax.py": "error: bad/syntax.py:10:25: cannot parse: expected ':'",
        "utf16.py": "error: bad/utf16.py:1: UTF-16 text (the file starts with a UTF-16 byte "
                    "order mark); Python source is UTF-8 unless a coding line says otherwise: "
                    "save it as UTF-8",
    }


def _shown(name: str) -> str:
    """A file name as tsfix prints it on stderr: control characters escaped."""
    return (name.replace("\n", "\\n").replace("\x1b", "\\x1b")
            .replace("\u202e", "\\u202e"))


def _no_pwned(root: Path) -> None:
    assert not [p for p in root.rglob("*PWNED*") if p.parent.name != "bad"], \
        "something ran the injected command"
    assert sorted(p.name for p in root.rglob("*PWNED*")) == sorted(
        n for n in INJECTED_NAMES if "PWNED" in n), "files named PWNED appeared"


def test_bad_folder_is_reported_file_by_file_and_nothing_runs(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    errors = bad_folder(tmp_path)
    before = snapshot(tmp_path)

    done = tsfix("apply", "--rule", "lift-branch", "--no-verify", "bad", cwd=tmp_path)

    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stderr.splitlines()
    assert [line for line in lines if line.startswith("error")] == [
        errors[name] for name in sorted(errors)]
    # Every line is one of tsfix's own: a name with a newline does not start a line, an
    # escape sequence does not reach the terminal.
    assert "\x1b" not in done.stderr and "\u202e" not in done.stderr
    # ("unverified: <reason> - 8 classes, e.g. bad/...": a reason many classes share, once.)
    assert all(line.startswith(("error: bad/", "bad/", "rewrote bad/", "summary:", "  ",
                                "unverified: ", "rejected: "))
               or line.endswith("unverified.") for line in lines), lines
    rewritten = [*INJECTED_NAMES, "content.py", "model.py"]
    assert sorted(line for line in lines if line.startswith("rewrote ")) == sorted(
        f"rewrote bad/{_shown(name)}" for name in rewritten)
    after = snapshot(tmp_path)
    for name in errors:
        if name != "loop.py":
            assert after[f"bad/{name}"] == before[f"bad/{name}"], name
    for name in rewritten:
        assert lifted(after[f"bad/{name}"].decode()), name
    assert "$(touch PWNED) `touch PWNED`" in after["bad/content.py"].decode()
    _no_pwned(tmp_path)


def test_bad_folder_diff_quotes_odd_names_as_git_does(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    bad_folder(tmp_path)
    before = snapshot(tmp_path)

    done = tsfix("apply", "--rule", "lift-branch", "--no-verify", "--dry-run", "bad",
                 cwd=tmp_path)

    assert done.returncode == 3, done.stderr
    headers = [line for line in done.stdout.splitlines() if line.startswith(("--- ", "+++ "))]
    assert '--- "a/bad/new\\nline.py"' in headers and '+++ "b/bad/new\\nline.py"' in headers
    assert '--- "a/bad/\\033[2Jclear.py"' in headers
    assert "--- a/bad/$(touch PWNED).py" in headers
    # The file's own bytes are the diff's business (as in git): the docstring is shown as is.
    assert '+    """\x1b[2J $(touch PWNED)' not in done.stdout    # an unchanged line
    assert snapshot(tmp_path) == before
    _no_pwned(tmp_path)


def test_bad_folder_in_check_and_interactive_without_stdin(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    errors = bad_folder(tmp_path)
    before = snapshot(tmp_path)

    checked = tsfix("check", "bad", cwd=tmp_path)
    assert checked.returncode == 3, checked.stderr
    assert "Traceback" not in checked.stderr + checked.stdout
    assert [line.removeprefix("error: ").split(":")[0] for line in checked.stderr.splitlines()
            if line.startswith("error: ")] == [f"bad/{name}" for name in sorted(errors)]

    closed = subprocess.run(
        ["sh", "-c", 'exec "$0" -m tsfix.cli.main apply --rule lift-branch --no-verify '
                     "--interactive bad <&-", sys.executable],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert closed.returncode == 3, closed.stderr         # the unreadable files failed
    assert "Traceback" not in closed.stderr + closed.stdout
    assert closed.stdout.count("Apply this hunk") == 1   # end of input is q
    assert snapshot(tmp_path) == before
    _no_pwned(tmp_path)


# ---- every row of the exit-code table ----------------------------------------------------------

Setup = Callable[[Project], None]


def _model(project: Project) -> None:
    project.pyproject()
    project.write("model.py", MODEL)


def _clean(project: Project) -> None:
    project.pyproject()
    project.write("plain.py", CLEAN_SOURCE)


def _with(settings: str = "", files: dict[str, str | bytes] | None = None,
          examples: dict[str, Any] | None = None, raw: str | None = None) -> Setup:
    def setup(project: Project) -> None:
        if raw is not None:
            project.write("pyproject.toml", raw)
        else:
            project.pyproject(examples, settings=settings)
        for name, content in (files or {"model.py": MODEL}).items():
            project.write(name, content)
    return setup


def _read_only(project: Project) -> None:
    _model(project)
    (project.root / "model.py").chmod(0o444)


def _loop(project: Project) -> None:
    _clean(project)
    (project.root / "loop.py").symlink_to("loop.py")


EXIT_TABLE: list[tuple[str, Setup, list[str], int]] = [
    # 0: nothing to change, or every rewrite applied
    ("0-nothing-to-change", _clean, ["apply", "."], 0),
    ("0-nothing-to-change-check", _clean, ["apply", "--check", "."], 0),
    ("0-applied", _model, ["apply", "--no-verify", "."], 0),
    ("0-empty-folder-warns", _with(files={"docs/README.txt": "x"}), ["apply", "docs"], 0),
    # 1: --check / --dry-run: changes would be made
    ("1-check", _model, ["apply", "--no-verify", "--check", "."], 1),
    ("1-dry-run", _model, ["apply", "--no-verify", "--dry-run", "."], 1),
    ("1-diff", _model, ["apply", "--no-verify", "--diff", "."], 1),
    # 2: usage or configuration error
    ("2-unknown-rule", _model, ["apply", "--rule", "lift-brnch", "."], 2),
    ("2-unknown-rule-in-config", _with('rules = ["x"]'),
     ["apply", "--rule", "lift-branch", "."], 2),
    ("2-unknown-key", _with("rulez = 1"), ["apply", "."], 2),
    ("2-invalid-toml", _with(raw="[tool.tsfix\n"), ["apply", "."], 2),
    ("2-negative-line-length", _with("line-length = -5"), ["apply", "."], 2),
    ("2-unwritable-report", _model, ["apply", "--report", "missing/r.json", "."], 2),
    ("2-interactive-and-dry-run", _model, ["apply", "--interactive", "--dry-run", "."], 2),
    ("2-missing-path", _model, ["apply", "nope.py"], 2),
    # 3: rejected (slow tests below), a file failed, --require-verified and unverified
    ("3-unreadable", _loop, ["apply", "--no-verify", "."], 3),
    ("3-not-decodable", _with(files={"m.py": b"# caf\xe9\n" + MODEL.encode()}),
     ["apply", "--no-verify", "."], 3),
    ("3-does-not-parse", _with(files={"m.py": "import torch.nn as nn\nclass A(nn.Module:\n"}),
     ["apply", "--no-verify", "."], 3),
    ("3-does-not-parse-dry-run", _with(files={"m.py": "class A(nn.Module:\n"}),
     ["apply", "--no-verify", "--dry-run", "."], 3),
    ("3-bad-example-spec", _with(examples={"model.py:Net": {"inputs": ["randm(2)"]}}),
     ["apply", "."], 3),
    ("3-example-for-missing-class", _with(examples={"model.py:Nett": TWO_CONFIGS}),
     ["apply", "."], 3),
    ("3-example-for-missing-file", _with(examples={"gone.py:Net": TWO_CONFIGS},
                                         files={"plain.py": CLEAN_SOURCE}), ["apply", "."], 3),
    ("3-read-only", _read_only, ["apply", "--no-verify", "."], 3),
    ("3-require-verified", _model, ["apply", "--no-verify", "--require-verified", "."], 3),
]


@pytest.mark.parametrize(("setup", "args", "code"), [row[1:] for row in EXIT_TABLE],
                         ids=[row[0] for row in EXIT_TABLE])
def test_exit_code_table(project: Project, setup: Setup, args: list[str], code: int) -> None:
    setup(project)
    before = project.snapshot()
    result = project.cli(*args)
    no_traceback(result)
    assert result.exit_code == code, result.output
    if code != 0 or "--no-verify" not in args:
        assert project.snapshot() == before, "a failed or pending run wrote something"
    if code == 3:
        assert "error: " in result.stderr or "rejected" in result.stderr


@pytest.mark.slow
def test_exit_code_table_rejected_by_validation(tmp_path: Path) -> None:
    """The first case of row 3: a rewrite validation rejects is not written, exit 3."""
    folder = copy_fixture(tmp_path, "lift-branch-rejected")
    (folder / ".git").mkdir()
    before = snapshot(folder)
    done = tsfix("apply", "--rule", "lift-branch", ".", cwd=folder)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert " [lift-branch] rejected: " in done.stderr
    assert snapshot(folder)["scaled_residual.in.py"] != before["scaled_residual.in.py"] or \
        "rewrote" not in done.stderr


# ---- models that hang, abort, segfault or are killed (validation workers: slow) ----------------

CRASHES = {
    "hang": ["import time"], "abort": ["import os"], "segv": ["import ctypes"],
    "oom": ["import os", "import signal"],
}
CRASH_LINES = {
    "hang": "time.sleep(600)",
    "abort": "os.abort()",
    "segv": "ctypes.string_at(0)",
    # What the OOM killer does to a process: SIGKILL, no chance to say anything.
    "oom": "os.kill(os.getpid(), signal.SIGKILL)",
}


@pytest.mark.slow
@pytest.mark.parametrize("require_verified", [False, True])
def test_crashing_models_get_a_verdict_and_the_rest_is_validated(project: Project,
                                                                 require_verified: bool
                                                                 ) -> None:
    examples = {f"{name}.py:Net": TWO_CONFIGS for name in [*CRASHES, "good"]}
    project.pyproject(examples)
    for name, header in CRASHES.items():
        project.write(f"{name}.py", model_source(header=header,
                                                 forward_lines=[CRASH_LINES[name]]))
    project.write("good.py", MODEL)
    before = project.snapshot()

    # -v: each model's file's class lines (without it the models' lines stand for them).
    done = tsfix("apply", "--rule", "lift-branch", "--timeout", "5", "-j", "2", "-v",
                 *(["--require-verified"] if require_verified else []), ".",
                 cwd=project.root)

    assert "Traceback" not in done.stderr
    assert done.returncode == (3 if require_verified else 0), done.stderr
    lines = done.stderr.splitlines()
    assert any(line.startswith("good.py:5: Net [lift-branch] verified: ") for line in lines)
    assert lifted((project.root / "good.py").read_text())
    for name in CRASHES:
        # Line numbers refer to the file as it was: the import lines come first.
        verdict = f"{name}.py:{5 + len(CRASHES[name])}: Net [lift-branch] "
        [line] = [line for line in lines if line.startswith(verdict)]
        expected = "rejected: unverified and --require-verified: " if require_verified \
            else "unverified (not written): "
        assert line.startswith(verdict + expected), line
        # Nothing proved the lifted branch keeps eager results: it is not written either way.
        assert (project.root / f"{name}.py").read_bytes() == before[f"{name}.py"][0], name


# ---- Ctrl-C ------------------------------------------------------------------------------------

INTERRUPTED_NOTHING = ("interrupted: stopped before anything was written; every file is as it "
                       "was\n")


def _zoo(root: Path, models: int, *, hang: bool = False) -> Path:
    """``models`` lift-branch candidates (and, with ``hang``, one whose forward sleeps, with
    an example table so that validation runs it)."""
    zoo = root / "zoo"
    (zoo / ".git").mkdir(parents=True)
    examples = {}
    for i in range(models):
        (zoo / f"model_{i:02d}.py").write_text(model_source(f"Net{i}", flag=f"use_{i}"))
    if hang:
        (zoo / "hang.py").write_text(model_source(header=["import time"],
                                                  forward_lines=["time.sleep(600)"]))
        examples["hang.py:Net"] = TWO_CONFIGS
    (zoo / "pyproject.toml").write_text(pyproject_text(examples))
    return zoo


def _start(zoo: Path, *args: str) -> subprocess.Popen[str]:
    """tsfix in a session of its own, so that SIGINT to its process group is what a Ctrl-C
    in a terminal does: every process of the run gets it."""
    return subprocess.Popen([sys.executable, "-m", "tsfix.cli.main", "apply", *args, "."],
                            cwd=zoo, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)


def _ctrl_c(process: subprocess.Popen[str]) -> tuple[str, str]:
    os.killpg(process.pid, signal.SIGINT)
    return process.communicate(timeout=120)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs /proc")
def test_ctrl_c_while_rewrite_processes_start(tmp_path: Path) -> None:
    """The moment that printed a traceback per process: the parallel rewrite processes are
    starting (spawn imports their modules) when Ctrl-C comes."""
    zoo = _zoo(tmp_path, 40)
    before = snapshot(zoo)
    # Just after the fork a child dies of SIGINT silently; the tracebacks came while each
    # one imported its modules, a little later.
    for after in (0.05, 0.15, 0.3):
        process = _start(zoo, "--rule", "lift-branch", "--no-verify", "-j", "2", "--no-cache")
        deadline = time.monotonic() + 60
        while not _children(process.pid) and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(after)
        _, stderr = _ctrl_c(process)
        assert process.returncode == 130, stderr
        assert stderr == INTERRUPTED_NOTHING
        assert snapshot(zoo) == before


@pytest.mark.slow
# From 0.15 s: what comes earlier falls in Python's own start-up (site.py), before any of
# tsfix's code can say anything.
@pytest.mark.parametrize("delay", [0.15, 0.25, 0.4, 1.0, 2.0, 3.5, 6.0])
def test_ctrl_c_at_any_moment_is_one_message_and_exit_130(tmp_path: Path, delay: float
                                                          ) -> None:
    """Start-up, imports, rewriting, the validation worker starting and running a model that
    hangs: wherever Ctrl-C falls, one message and exit 130, and nothing written (writes come
    after validation)."""
    zoo = _zoo(tmp_path, 6, hang=True)
    before = snapshot(zoo)
    process = _start(zoo, "--rule", "lift-branch", "-j", "1", "--no-cache")
    time.sleep(delay)
    stdout, stderr = _ctrl_c(process)
    assert process.returncode == 130, stderr
    assert stderr == INTERRUPTED_NOTHING, stderr
    assert stdout == ""
    assert snapshot(zoo) == before
    assert not list(zoo.rglob("*.tsfix"))


def test_ctrl_c_in_interactive_review_lists_the_files_written(tmp_path: Path) -> None:
    zoo = _zoo(tmp_path, 2)
    before = snapshot(zoo)
    process = subprocess.Popen(
        [sys.executable, "-m", "tsfix.cli.main", "apply", "--rule", "lift-branch",
         "--no-verify", "--interactive", "."], cwd=zoo, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert process.stdin is not None and process.stdout is not None
    seen = bytearray()

    def read() -> None:
        assert process.stdout is not None
        while chunk := process.stdout.read1(4096):  # type: ignore[attr-defined]
            seen.extend(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def wait_for(text: bytes) -> None:
        deadline = time.monotonic() + 60
        while text not in seen:
            assert time.monotonic() < deadline, bytes(seen).decode()
            time.sleep(0.01)

    wait_for(b"--- model_00.py  (1/2)")
    process.stdin.write(b"a\n")            # every hunk of model_00.py: it is written
    process.stdin.flush()
    wait_for(b"--- model_01.py  (1/2)")    # ... and the review waits on the next file
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 130, stderr
    assert stderr.decode().endswith(
        "interrupted: stopped after rewriting 1 file; every other file is as it was:\n"
        "  rewrote model_00.py\n")
    assert b"Traceback" not in stderr and b"Aborted" not in stderr
    after = snapshot(zoo)
    assert "use_0: Optional[bool] = None" in after["model_00.py"].decode()
    assert after["model_01.py"] == before["model_01.py"]


def test_ctrl_c_between_two_writes_lists_the_first(project: Project,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    project.pyproject()
    project.write("a.py", MODEL)
    project.write("b.py", MODEL)
    real = engine.write_source
    calls: list[Path] = []

    def write_then_interrupt(path: Path, *args: Any) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(path, *args)

    monkeypatch.setattr(engine, "write_source", write_then_interrupt)
    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", ".")

    assert result.exit_code == 130, result.output
    assert result.stderr == ("interrupted: stopped after rewriting 1 file; every other file "
                             "is as it was:\n  rewrote a.py\n")
    assert lifted(project.bytes("a.py").decode())
    assert project.bytes("b.py") == MODEL.encode()


def test_ctrl_c_after_the_writes_lists_them_all(project: Project,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    project.pyproject()
    project.write("a.py", MODEL)
    project.write("b.py", MODEL)

    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_print_outcome", interrupted)
    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", ".")

    assert result.exit_code == 130, result.output
    assert result.stderr == ("interrupted: stopped after rewriting 2 files; every other file "
                             "is as it was:\n  rewrote a.py\n  rewrote b.py\n")


def test_ctrl_c_in_any_command_is_not_clicks_aborted(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted() -> dict[str, str]:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "rule_summaries", interrupted)
    result = CliRunner().invoke(cli.main, ["rules"])
    assert result.exit_code == 130, result.output
    assert result.output == INTERRUPTED_NOTHING


def test_ctrl_c_that_python_wrapped_in_a_runtime_error_is_still_ctrl_c(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.11 turns a KeyboardInterrupt raised while a class is created (a dataclass
    field's __set_name__, during an import) into a RuntimeError caused by it."""
    project.pyproject()
    project.write("a.py", MODEL)

    def interrupted_import(*_: Any, **__: Any) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from exc

    monkeypatch.setattr(engine, "run", interrupted_import)
    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", ".")
    assert result.exit_code == 130, result.output
    assert result.stderr == INTERRUPTED_NOTHING


def test_report_of_interrupted_run_is_not_written(project: Project,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C ends the run where it is: no half-true report either."""
    project.pyproject()
    project.write("a.py", MODEL)

    def interrupted(*_: Any, **__: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_print_outcome", interrupted)
    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", "--report",
                         "r.json", ".")
    assert result.exit_code == 130
    assert not (project.root / "r.json").exists()


def test_the_pools_threads_import_nothing_while_the_import_lock_is_held() -> None:
    """The Ctrl-C hang: a Ctrl-C that lands in the main thread's import can leave Python's
    import lock held; a pool thread that then imports (a text file's codec, sysconfig) waits
    for it forever and the run never ends. What the threads call must not import."""
    script = textwrap.dedent("""\
        import _imp, os, threading
        from tsfix.codemods.validation.pool import _installed_file, resident_mb

        _imp.acquire_lock()
        thread = threading.Thread(target=lambda: (resident_mb(os.getpid()),
                                                  _installed_file("/nowhere/model.py")),
                                  daemon=True)
        thread.start()
        thread.join(20)
        print("stuck" if thread.is_alive() else "done")
        os._exit(0)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.strip() == "done", done.stderr
