"""``tsfix apply --interactive``: hunk-by-hunk review driven through its prompts."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import model_source
from tsfix.cli.interactive import apply_hunks, hunks_of, review
from tsfix.cli.main import main as cli_main
from tsfix.codemods.pipeline.engine import Options, run
from tsfix.codemods.pipeline.report import ClassResult, FileResult, RunResult

# Two classes far enough apart to give two hunks.
TWO_MODELS = (model_source("First", "use_a")
              + "\n\n" + "\n".join(f"CONSTANT_{i} = {i}" for i in range(12)) + "\n\n\n"
              + model_source("Second", "use_b").split("\n\n\n", 1)[1])


def _apply(path: Path, answers: str, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli_main, ["apply", "--rule", "lift-branch", "--no-verify",
                                           "--interactive", *extra, str(path)], input=answers)
    return result.exit_code, result.output


@pytest.fixture
def models(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "a.py").write_text(TWO_MODELS)
    (folder / "b.py").write_text(model_source("Third", "use_c"))
    return folder


def test_hunks_apply_all_none_or_some() -> None:
    new = TWO_MODELS.replace("if self.use_a:", "if use_a:").replace("if self.use_b:",
                                                                    "if use_b:")
    hunks = hunks_of(TWO_MODELS, new)
    assert len(hunks) == 2
    assert apply_hunks(TWO_MODELS, new, hunks, [True, True]) == new
    assert apply_hunks(TWO_MODELS, new, hunks, [False, False]) == TWO_MODELS
    only_second = apply_hunks(TWO_MODELS, new, hunks, [False, True])
    assert "if self.use_a:" in only_second and "if use_b:" in only_second


def test_yes_and_no_per_hunk(models: Path) -> None:
    code, output = _apply(models / "a.py", "y\ny\nn\n")
    text = (models / "a.py").read_text()
    assert code == 0, output
    # Each hunk is shown under its class, rule and verdict; the typing import on its own.
    assert "(1/3) (imports the rewrites below need)" in output
    assert "(2/3) First [lift-branch] unverified" in output
    assert "(3/3) Second [lift-branch] unverified" in output
    assert "from typing import Optional" in text
    assert "if self.use_a:" not in text and "if self.use_b:" in text
    assert "rewrote " in output and "with 2 of 3 hunks (a partial rewrite is not validated)" \
        in output


def test_all_rest_of_file_then_quit(models: Path) -> None:
    # a: this and every later hunk of a.py; then q on b.py's hunk.
    code, output = _apply(models, "?\na\nq\n")
    assert code == 0, output
    assert "d - do not apply this hunk or any of the later hunks in the file" in output
    assert "if self.use_a:" not in (models / "a.py").read_text()
    assert "if self.use_b:" not in (models / "a.py").read_text()
    assert (models / "b.py").read_text() == model_source("Third", "use_c")
    assert "kept " in output and "b.py unchanged" in output


def test_nothing_is_written_before_a_file_is_decided(models: Path) -> None:
    before = (models / "a.py").read_text()
    result = run([models], Options(rules=["lift-branch"], verify=False, mode="diff"))
    seen: list[bool] = []

    def ask(prompt: str) -> str:
        # Every prompt about a.py comes while a.py is still as it was.
        seen.append((models / "a.py").read_text() == before)
        return "y"

    lines = review(result, ask).lines

    # a.py's 3 hunks are asked about while it is untouched; it is written as soon as they
    # are decided, before b.py's 2 prompts.
    assert seen == [True, True, True, False, False]
    assert lines[0].startswith("rewrote ") and lines[0].endswith("a.py")
    assert "if self.use_a:" not in (models / "a.py").read_text()


def test_end_of_input_counts_as_quit(models: Path) -> None:
    code, output = _apply(models / "a.py", "y\n")
    assert code == 0, output
    assert "with 1 of 3 hunks" in output           # the import only; the rest declined
    assert "if self.use_a:" in (models / "a.py").read_text()


def test_closed_stdin_counts_as_quit(models: Path) -> None:
    # `<&-`: there is no standard input at all (sys.stdin is None), not merely an empty one.
    done = subprocess.run(
        ["sh", "-c", 'exec "$0" -m tsfix.cli.main apply --rule lift-branch --no-verify '
                     '--interactive "$1" <&-', sys.executable, str(models / "a.py")],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert done.stdout.count("Apply this hunk [y,n,a,d,q,?]? ") == 1
    assert done.stderr.endswith(f"kept {models / 'a.py'} unchanged\n"), done.stderr
    assert (models / "a.py").read_text() == TWO_MODELS


def _imports_cleanly(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the module's top level (class bodies, signatures and their annotations) against a
    stand-in torch, as importing it would: a name it uses and does not define raises."""
    torch, nn = types.ModuleType("torch"), types.ModuleType("torch.nn")
    nn.Module = object  # type: ignore[attr-defined]
    torch.nn = nn  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.nn", nn)
    exec(compile(text, "partial.py", "exec"), {"__name__": "partial"})


def test_partial_accept_brings_along_the_import_it_needs(models: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    # The reproduction of issue 15: the import hunk declined, the first class accepted.
    new = run([models / "a.py"], Options(rules=["lift-branch"], verify=False,
                                         mode="diff")).files[0].new_text
    assert new is not None
    code, output = _apply(models / "a.py", "n\ny\nq\n")

    assert code == 0, output
    text = (models / "a.py").read_text()
    hunks = hunks_of(TWO_MODELS, new)
    assert text == apply_hunks(TWO_MODELS, new, hunks, [True, True, False])
    _imports_cleanly(text, monkeypatch)
    assert output.endswith(
        f"rewrote {models / 'a.py'} with 2 of 3 hunks (a partial rewrite is not validated); "
        "hunk 1/3 came along: it imports Optional, which the accepted hunks use\n")


SHORT = "import torch\n\n\nclass A:\n    def f(self, x):\n        return x\n"
SHORT_NEW = ("from typing import Optional\n\nimport torch\n\n\nclass A:\n"
             "    def f(self, x: Optional[int] = None):\n        return x\n")


def _changed(path: Path, original: str, new: str) -> RunResult:
    path.write_text(original)
    record = FileResult(path, path.name, "changed", new_text=new, classes=[
        ClassResult("lift-branch", "A", (4, 6), "", {}, "verified")])
    return RunResult([record], ["lift-branch"], "diff", True, False)


def test_an_import_next_to_a_change_is_a_hunk_of_its_own(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    hunks = hunks_of(SHORT, SHORT_NEW)
    assert [h.text for h in hunks] == [
        "@@ -1,3 +1,5 @@\n+from typing import Optional\n+\n import torch\n \n \n",
        "@@ -2,5 +4,5 @@\n \n \n class A:\n-    def f(self, x):\n"
        "+    def f(self, x: Optional[int] = None):\n         return x\n"]
    answers = iter(["n", "y"])
    reviewed = review(_changed(tmp_path / "m.py", SHORT, SHORT_NEW), lambda _: next(answers))
    assert (tmp_path / "m.py").read_text() == SHORT_NEW
    assert reviewed.lines == [
        "rewrote m.py with 2 of 2 hunks; hunk 1/2 came along: it imports Optional, which the "
        "accepted hunks use"]
    _imports_cleanly(SHORT_NEW, monkeypatch)


def test_partial_accept_that_needs_a_declined_change_is_refused(tmp_path: Path) -> None:
    filler = "".join(f"CONSTANT_{i} = {i}\n" for i in range(12))
    original = f"import torch\n\n{filler}\n\nclass A:\n    scale = 1.0\n"
    new = (f"import torch\n\n\ndef _half() -> float:\n    return 0.5\n\n{filler}\n\n"
           "class A:\n    scale = _half()\n")
    answers = iter(["n", "y"])
    reviewed = review(_changed(tmp_path / "m.py", original, new), lambda _: next(answers))
    assert (tmp_path / "m.py").read_text() == original
    assert reviewed.lines == [
        "error: m.py: the accepted hunks use _half, which declined hunk 1/2 defines; nothing "
        "written (accept both, or neither)"]
    assert reviewed.written == frozenset()


def test_interactive_refuses_dry_run(models: Path) -> None:
    code, output = _apply(models, "", "--dry-run")
    assert code == 2 and "cannot be combined" in output
