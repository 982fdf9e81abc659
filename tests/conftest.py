"""Shared helpers for the CLI, validation, sources and config tests.

Tests import the plain helpers with ``from conftest import ...`` (pytest puts this folder on
``sys.path``). Every test builds its own small project in ``tmp_path``: model files plus a
``pyproject.toml`` with a ``[tool.tsfix]`` table and ``[tool.tsfix.examples]`` tables, and
runs from that folder (so report paths are relative to it).

The fixture helpers at the end serve the rule tests: ``fixtures/<rule>/`` holds pairs
``<case>.in.py`` / ``<case>.out.py`` (the input and what the rule must make of it). A rule test
module runs its rule with ``rewrite = rule_rewriter(TheRule)``: every rewrite it asserts on is
also checked to parse and to be a fixed point.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import libcst as cst
import pytest
from click.testing import CliRunner, Result
from tsfix.cli.main import main as cli_main
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.report import RunResult
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.base import Observations, Rule


def model_source(class_name: str = "Net", flag: str = "use_act", *,
                 header: Iterable[str] = (), init_lines: Iterable[str] = (),
                 forward_lines: Iterable[str] = (), init_params: str = "") -> str:
    """A small nn.Module whose forward() branches on ``self.<flag>`` (a lift-branch candidate).

    ``header`` lines go before the imports; ``init_lines`` / ``forward_lines`` are statements
    (without indentation) added at the end of ``__init__`` / the start of ``forward``.
    """
    head = "".join(f"{line}\n" for line in header)
    init_extra = "".join(f"        {line}\n" for line in init_lines)
    forward_extra = "".join(f"        {line}\n" for line in forward_lines)
    extra_params = f", {init_params}" if init_params else ""
    return (
        f"{head}import torch\n"
        "import torch.nn as nn\n"
        "\n"
        "\n"
        f"class {class_name}(nn.Module):\n"
        f"    def __init__(self, {flag}=True{extra_params}):\n"
        "        super().__init__()\n"
        f"        self.{flag} = {flag}\n"
        f"{init_extra}"
        "\n"
        "    def forward(self, x):\n"
        f"{forward_extra}"
        f"        if self.{flag}:\n"
        "            x = torch.relu(x)\n"
        "        return x\n"
    )


# A module with nothing lift-branch could rewrite.
CLEAN_SOURCE = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.fc(x))
""")


def toml_value(value: Any) -> str:
    """Just enough TOML for example tables: scalars, arrays and inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(k)} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    raise TypeError(f"no TOML for {value!r}")


def pyproject_text(examples: Mapping[str, Mapping[str, Any]] | None = None,
                   settings: str = "", extra: str = "") -> str:
    """``[tool.tsfix]`` with ``settings`` lines, one examples table per key, then ``extra``."""
    parts = ["[tool.tsfix]\n", settings.strip() + "\n" if settings.strip() else ""]
    for key, table in (examples or {}).items():
        parts.append(f'\n[tool.tsfix.examples."{key}"]\n')
        for name, value in table.items():
            parts.append(f"{name} = {toml_value(value)}\n")
    if extra:
        parts.append("\n" + extra.strip() + "\n")
    return "".join(parts)


TWO_CONFIGS = {"init": [{"use_act": True}, {"use_act": False}], "inputs": ["randn(2, 4)"]}


class Project:
    """A throw-away project folder (also the working directory of the test)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, relative: str, content: str | bytes) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_bytes(content.encode("utf-8"))
        return path

    def pyproject(self, examples: Mapping[str, Mapping[str, Any]] | None = None,
                  settings: str = "", extra: str = "") -> Path:
        return self.write("pyproject.toml", pyproject_text(examples, settings, extra))

    def bytes(self, relative: str) -> bytes:
        return (self.root / relative).read_bytes()

    def snapshot(self) -> dict[str, tuple[bytes, int, int]]:
        """Every file under the project: contents, mtime (ns) and mode."""
        found = {}
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                info = path.stat()
                found[path.relative_to(self.root).as_posix()] = (
                    path.read_bytes(), info.st_mtime_ns, info.st_mode)
        return found

    def cli(self, *args: str) -> Result:
        return CliRunner().invoke(cli_main, list(args), catch_exceptions=True)

    def run(self, *paths: str, **options: Any) -> RunResult:
        return run([Path(p) for p in paths or (".",)], Options(**options))


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI caches outcomes by default: every test gets its own empty cache, so no test
    sees another's (or the developer's) cached verdicts."""
    directory = tmp_path_factory.mktemp("tsfix-cache")
    monkeypatch.setenv("TSFIX_CACHE_DIR", str(directory))
    return directory


@pytest.fixture(autouse=True)
def workers_only_when_slow(request: pytest.FixtureRequest,
                           monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A validation worker imports torch (seconds): a test that starts one must be marked
    ``@pytest.mark.slow``, so that ``-m "not slow"`` stays fast. In any other test, starting
    a worker fails (and the test says why)."""
    if request.node.get_closest_marker("slow") is not None:
        yield
        return
    from tsfix.codemods.validation import pool

    started: list[str] = []

    def refuse(self: object, *args: Any, **kwargs: Any) -> None:
        started.append(request.node.nodeid)
        raise RuntimeError("a validation worker was started in a test not marked slow")

    monkeypatch.setattr(pool._Worker, "__init__", refuse)
    yield
    if started:
        pytest.fail(f"{started[0]} starts validation workers (torch): mark it "
                    "@pytest.mark.slow, or run it with verify=False / --no-verify")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Project:
    root = tmp_path / "proj"
    root.mkdir()
    # A .git marker bounds find_pyproject's upward search to this folder.
    (root / ".git").mkdir()
    monkeypatch.chdir(root)
    return Project(root)


def no_traceback(result: Result) -> None:
    """The command ended by its own exit, printing no Python traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"unexpected exception: {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.output


def file_record(report: Mapping[str, Any], path: str) -> dict[str, Any]:
    matches = [f for f in report["files"] if f["path"] == path]
    assert len(matches) == 1, f"expected one record for {path}: {report['files']}"
    return matches[0]


def by_display(result: RunResult) -> dict[str, Any]:
    return {f.display: f for f in result.files}


# ---- fixture folders --------------------------------------------------------------------------

FIXTURES_ROOT = Path(__file__).resolve().parent.parent / "fixtures"


def fixture_pairs(folder: Path) -> list[tuple[Path, Path]]:
    """Every ``<case>.in.py`` under ``folder`` (subfolders too), sorted, with its
    ``<case>.out.py`` beside it (which need not exist)."""
    return [(p, p.with_name(p.name.replace(".in.py", ".out.py")))
            for p in sorted(folder.rglob("*.in.py"))]


def copy_fixture(tmp_path: Path, name: str, *, inputs_only: bool = False) -> Path:
    """Copy ``fixtures/<name>`` to ``tmp_path/<name>`` (without ``__pycache__``) and return
    the copy. ``inputs_only`` deletes the copied ``*.out.py`` files at its top level."""
    target = tmp_path / name
    shutil.copytree(FIXTURES_ROOT / name, target, ignore=shutil.ignore_patterns("__pycache__"))
    if inputs_only:
        for expected in target.glob("*.out.py"):
            expected.unlink()
    return target


@dataclass(frozen=True)
class AppliedRun:
    """One ``tsfix apply --report`` run in a subprocess: its exit, stderr and JSON report."""

    returncode: int
    stderr: str
    report: dict[str, Any]

    @property
    def files(self) -> list[dict[str, Any]]:
        return list(self.report["files"])

    @property
    def classes(self) -> list[dict[str, Any]]:
        """The class records of every file, in report order."""
        return [c for f in self.report["files"] for c in f["classes"]]


def apply_with_report(folder: Path, *rules: str, target: Path | None = None,
                      workdir: Path | None = None) -> AppliedRun:
    """Run ``python -m tsfix.cli.main apply --rule R... --report report.json TARGET``.

    ``target`` defaults to ``folder``; the command runs in ``workdir`` (default: the parent of
    ``folder``), which is also where ``report.json`` is written.
    """
    workdir = workdir or folder.parent
    report = workdir / "report.json"
    report.unlink(missing_ok=True)
    args = [a for rule in rules for a in ("--rule", rule)]
    done = subprocess.run([sys.executable, "-m", "tsfix.cli.main", "apply", *args, "--report",
                           str(report), str(target or folder)],
                          capture_output=True, text=True, cwd=workdir)
    assert report.is_file(), f"no report written (exit {done.returncode}):\n{done.stderr}"
    return AppliedRun(done.returncode, done.stderr, json.loads(report.read_text()))


def load_module(path: Path, name: str) -> types.ModuleType:
    """Import the file at ``path`` as module ``name`` (registered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# ---- rule tests ----------------------------------------------------------------------------------

def rewrite_to_fixed_point(text: str, rules: Sequence[type[Rule]], *, path: str = "m.py",
                           observed: Observations | None = None,
                           line_length: int = 88) -> Rewrite:
    """``rewrite_source`` of ``text``, checked the way every rule test needs: the result
    parses, and a second run over it changes nothing (a rule reaches its fixed point in one
    run, or ``tsfix`` run twice would rewrite twice)."""
    result = rewrite_source(
        text, RewriteSettings(rules, line_length=line_length), FileContext(path, observed=observed)
    )
    cst.parse_module(result.text)
    if result.changed:     # an unchanged result is the input: a second run is the same run
        again = rewrite_source(
            result.text,
            RewriteSettings(rules, line_length=line_length),
            FileContext(path, observed=observed),
        )
        assert not again.changed and again.text == result.text, "not a fixed point"
    return result


class RuleRewriter(Protocol):
    def __call__(self, code: str, *, path: str = ..., header: str = ...,
                 observed: Observations | None = ...) -> Rewrite: ...


def rule_rewriter(*rules: type[Rule], header: str = "", line_length: int = 88) -> RuleRewriter:
    """A rule test's ``rewrite(code)``: ``rules`` over ``header`` followed by the dedented
    ``code`` (as file ``path``, with ``observed`` argument types), through
    :func:`rewrite_to_fixed_point`. ``line_length``: black's, for the touched statements."""
    default_header = header

    def rewrite(code: str, *, path: str = "m.py", header: str = default_header,
                observed: Observations | None = None) -> Rewrite:
        return rewrite_to_fixed_point(header + textwrap.dedent(code), rules, path=path,
                                      observed=observed, line_length=line_length)

    return rewrite
