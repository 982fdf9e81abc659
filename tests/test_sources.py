"""Reading and writing source files byte-faithfully (no validation, so no torch)."""

from __future__ import annotations

import difflib
import json
import stat
import tokenize
from pathlib import Path

import pytest
from conftest import CLEAN_SOURCE, Project, by_display, model_source
from tsfix.codemods.pipeline.sources import read_source

MODEL = model_source()
# The only lines of MODEL that lift-branch has to change.
CHANGED_BY_RULE = {"    def forward(self, x):", "        if self.use_act:"}


def lifted(text: str) -> bool:
    return "use_act: Optional[bool] = None" in text and "if self.use_act:" not in text


def rewrite(project: Project, *paths: str):
    return project.run(*paths, verify=False)


# ---- encodings and line endings ----------------------------------------------------------------

def test_crlf_line_endings_are_kept(project: Project) -> None:
    project.pyproject()
    original = MODEL.replace("\n", "\r\n").encode()
    path = project.write("model.py", original)

    result = rewrite(project)

    assert by_display(result)["model.py"].status == "changed"
    data = path.read_bytes()
    assert lifted(data.decode())
    assert data.count(b"\r\n") == data.count(b"\n"), "every line ends with CRLF"
    assert b"\r\r" not in data
    compile(data, "model.py", "exec")


def test_latin1_file_with_coding_cookie_keeps_its_encoding(project: Project) -> None:
    project.pyproject()
    header = "# -*- coding: latin-1 -*-\n# Auteur : José Müller, café\n"
    original = (header + MODEL).encode("latin-1")
    path = project.write("model.py", original)

    result = rewrite(project)

    assert by_display(result)["model.py"].status == "changed", by_display(result)["model.py"]
    data = path.read_bytes()
    assert data.startswith(header.encode("latin-1")), "cookie and accents unchanged, in place"
    encoding, _ = tokenize.detect_encoding(iter(data.splitlines(keepends=True)).__next__)
    assert encoding == "iso-8859-1"
    text = data.decode("latin-1")
    assert lifted(text)
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")  # still latin-1, not re-encoded as UTF-8
    compile(data, "model.py", "exec")


def test_utf8_bom_is_kept(project: Project) -> None:
    project.pyproject()
    original = b"\xef\xbb\xbf" + ("# naïve café\n" + MODEL).encode("utf-8")
    path = project.write("model.py", original)

    rewrite(project)

    data = path.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf# na\xc3\xafve caf\xc3\xa9\n")
    assert data.count(b"\xef\xbb\xbf") == 1
    assert lifted(data.decode("utf-8-sig"))


def test_read_source_reports_crlf_and_encoding(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(b"# coding: latin-1\r\nx = '\xe9'\r\n")
    source = read_source(path)
    assert source.crlf is True
    assert "\r" not in source.text
    assert source.text == "# coding: latin-1\nx = 'é'\n"
    assert source.encode(source.text) == path.read_bytes()


def test_mixed_line_endings_round_trip(tmp_path: Path) -> None:
    # Not CRLF throughout: re-encoding the unchanged text must give the same bytes back.
    path = tmp_path / "m.py"
    path.write_bytes(b"a = 1\r\nb = 2\nc = 3\r\n")
    source = read_source(path)
    assert source.encode(source.text) == path.read_bytes()


def test_mixed_line_endings_untouched_lines_keep_theirs(project: Project) -> None:
    project.pyproject()
    lines = MODEL.splitlines(keepends=True)
    # CRLF everywhere except the two import lines (e.g. pasted from another editor).
    original = "".join(line if i < 2 else line.replace("\n", "\r\n")
                       for i, line in enumerate(lines)).encode()
    path = project.write("model.py", original)

    rewrite(project)

    data = path.read_bytes()
    assert lifted(data.decode())
    assert b"import torch\nimport torch.nn as nn\n" in data
    assert b"        super().__init__()\r\n        self.use_act = use_act\r\n" in data


# ---- writing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0o755, 0o640, 0o600])
def test_permission_bits_are_kept(project: Project, mode: int) -> None:
    project.pyproject()
    path = project.write("model.py", MODEL)
    path.chmod(mode)

    rewrite(project)

    assert lifted(path.read_text())
    assert stat.S_IMODE(path.stat().st_mode) == mode
    leftovers = [p.name for p in project.root.iterdir() if p.name.endswith(".tsfix")]
    assert leftovers == []


@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555])
def test_read_only_file_is_refused_and_left_alone(project: Project, mode: int) -> None:
    """As black and ruff do: a file without write permission is not replaced (the atomic
    rename would succeed, and does for root, whom permission bits do not stop)."""
    project.pyproject()
    locked = project.write("locked.py", MODEL)
    project.write("open.py", MODEL)
    locked.chmod(mode)
    before = locked.stat()

    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", ".")

    assert result.exit_code == 3, result.output
    assert (f"error: locked.py: cannot write: the file is read-only (mode {mode:04o}); "
            "make it writable to let tsfix rewrite it\n") in result.stderr
    assert locked.read_bytes() == MODEL.encode()
    after = locked.stat()
    assert (after.st_ino, after.st_mtime_ns, after.st_mode) == (
        before.st_ino, before.st_mtime_ns, before.st_mode)
    assert lifted((project.root / "open.py").read_text())
    assert [p.name for p in project.root.iterdir() if p.name.endswith(".tsfix")] == []


def test_symlinked_file_is_written_through_the_link(project: Project) -> None:
    project.pyproject()
    target = project.write("real/model.py", MODEL)
    (project.root / "models").mkdir()
    link = project.root / "models" / "model.py"
    link.symlink_to(Path("..") / "real" / "model.py")

    result = rewrite(project, "models")

    assert [f.status for f in result.files] == ["changed"]
    assert link.is_symlink(), "the link was replaced by a regular file"
    assert lifted(target.read_text()), "the file the link points to was not rewritten"


@pytest.mark.parametrize("endings", ["\n", "\r\n"])
def test_bytes_outside_the_rewritten_lines_are_identical(project: Project,
                                                         endings: str) -> None:
    # Code black would reformat everywhere: only the lines the rule touches may change.
    odd = (
        "import torch , os\n"
        "import torch.nn as nn\n"
        "x = [ 1,2,\n"
        "   3 ]\n"
        "def helper( a,b ):\n"
        "    return {'a':a , \"b\" :b}   \n"
        "\n"
        "\n"
        "class Other( nn.Module ):\n"
        "    def forward( self,x ):\n"
        "        return x+1    # trailing   comment\n"
        "\n"
        "\n"
        "class Net(nn.Module):\n"
        "    def __init__(self, use_act=True):\n"
        "        super().__init__()\n"
        "        self.use_act = use_act\n"
        "        self.w = [1,2,3]\n"
        "\n"
        "    def forward(self, x):\n"
        "        y = x*2    # keep   this\n"
        "        if self.use_act:\n"
        "            x = torch.relu( x )\n"
        "        z = {'k':1}\n"
        "        return x\n"
        "\n"
        "\n"
        "y = ( 1+\n"
        "  2 )\n"
    )
    project.pyproject()
    original = odd.replace("\n", endings).encode()
    path = project.write("model.py", original)

    rewrite(project)

    new = path.read_bytes()
    assert lifted(new.decode())
    old_lines = original.splitlines(keepends=True)
    new_lines = new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    replaced_old = [old_lines[i] for tag, i1, i2, _, _ in matcher.get_opcodes()
                    if tag in ("replace", "delete") for i in range(i1, i2)]
    # Every old line except the two the rule rewrites survives byte for byte, in order.
    assert {line.decode().rstrip("\r\n") for line in replaced_old} <= CHANGED_BY_RULE
    kept = [line for line in old_lines if line.decode().rstrip("\r\n") not in CHANGED_BY_RULE]
    matched = [old_lines[i] for block in matcher.get_matching_blocks()
               for i in range(block.a, block.a + block.size)]
    assert matched == kept
    assert all(line.endswith(endings.encode()) for line in new_lines)


# ---- what is skipped ---------------------------------------------------------------------------

def test_generated_files_are_skipped(project: Project) -> None:
    project.pyproject()
    generated = "# This file is @" + "generated by protoc-like-tool. Do not edit.\n" + MODEL
    project.write("gen_model.py", generated)
    project.write("model.py", MODEL)

    result = rewrite(project)

    files = by_display(result)
    assert files["gen_model.py"].status == "skipped"
    assert files["gen_model.py"].classes == []
    assert project.bytes("gen_model.py") == generated.encode()
    assert files["model.py"].status == "changed"


def test_exclude_globs_are_honoured(project: Project) -> None:
    project.pyproject(settings='exclude = ["legacy/**", "*_vendored.py"]')
    for name in ("legacy/old.py", "legacy/deep/older.py", "lib/thing_vendored.py",
                 "lib/model.py", "build/model.py", ".venv/model.py"):
        project.write(name, MODEL)

    result = rewrite(project)

    assert [f.display for f in result.files] == ["lib/model.py"]
    assert lifted(project.bytes("lib/model.py").decode())
    for name in ("legacy/old.py", "legacy/deep/older.py", "lib/thing_vendored.py",
                 "build/model.py", ".venv/model.py"):
        assert project.bytes(name) == MODEL.encode(), name


def test_exclude_is_relative_to_the_pyproject(project: Project, monkeypatch) -> None:
    project.pyproject(settings='exclude = ["sub/skip/*.py"]')
    project.write("sub/skip/a.py", MODEL)
    project.write("sub/keep/a.py", MODEL)
    monkeypatch.chdir(project.root / "sub")  # run from elsewhere, same configuration

    result = project.run(".", verify=False)

    assert sorted(f.display for f in result.files) == ["keep/a.py"]
    assert project.bytes("sub/skip/a.py") == MODEL.encode()


def _loops(project: Project) -> None:
    """A folder with a model, a link to itself and two links to each other."""
    project.pyproject()
    project.write("pkg/model.py", MODEL)
    (project.root / "pkg" / "self.py").symlink_to("self.py")
    (project.root / "pkg" / "a.py").symlink_to("b.py")
    (project.root / "pkg" / "b.py").symlink_to("a.py")


LOOP_ERRORS = ["error: pkg/a.py: cannot read: symbolic link loop (pkg/a.py -> b.py)",
               "error: pkg/b.py: cannot read: symbolic link loop (pkg/b.py -> a.py)",
               "error: pkg/self.py: cannot read: symbolic link loop (pkg/self.py -> self.py)"]


@pytest.mark.parametrize("mode", ["--dry-run", "--check", "write"])
def test_symlink_loops_are_reported_and_the_rest_is_rewritten(project: Project,
                                                              mode: str) -> None:
    _loops(project)
    result = project.cli("apply", "--rule", "lift-branch", "--no-verify",
                         *([mode] if mode != "write" else []), ".")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 3, result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("error")] == \
        LOOP_ERRORS
    assert lifted((project.root / "pkg" / "model.py").read_text()) == (mode == "write")
    if mode == "--dry-run":
        assert "+++ b/pkg/model.py" in result.stdout


def test_check_reports_symlink_loops_and_checks_the_rest(project: Project) -> None:
    _loops(project)
    result = project.cli("check", ".")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 3, result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("error")] == \
        LOOP_ERRORS
    assert "pkg/model.py:" in result.stdout          # its TSF204 finding


def test_folders_without_python_files_are_warned_about(project: Project) -> None:
    project.pyproject(settings='exclude = ["legacy/*.py"]')
    (project.root / "empty").mkdir()
    project.write("docs/README.txt", "no code here\n")
    project.write("legacy/old.py", MODEL)
    project.write("models/model.py", MODEL)

    result = project.cli("apply", "--rule", "lift-branch", "--no-verify", "--dry-run",
                         "empty", "docs", "legacy", "models")

    assert result.exit_code == 1, result.output
    assert [line for line in result.stderr.splitlines() if line.startswith("warning")] == [
        "warning: empty: no Python files found",
        "warning: docs: no Python files found",
        "warning: legacy: no Python files found (1 excluded by [tool.tsfix] exclude)"]
    report = project.cli("apply", "--rule", "lift-branch", "--no-verify", "--dry-run",
                         "--report", "r.json", "empty")
    assert report.exit_code == 0, report.output
    assert report.stderr == ("warning: empty: no Python files found\n"
                             "0 files would be changed, 0 unchanged; 0 class rewrites: "
                             "0 verified, 0 rejected, 0 unverified.\n")
    assert json.loads(project.bytes("r.json"))["warnings"] == [
        "empty: no Python files found"]
    # -q: only errors.
    assert project.cli("apply", "--no-verify", "-q", "empty").stderr == ""


def test_same_file_given_twice_is_processed_once(project: Project) -> None:
    project.pyproject()
    project.write("model.py", MODEL)
    result = project.run("model.py", ".", "./model.py", verify=False)
    assert [f.display for f in result.files] == ["model.py"]
    assert lifted(project.bytes("model.py").decode())


def test_files_without_modules_are_left_alone(project: Project) -> None:
    project.pyproject()
    project.write("plain.py", CLEAN_SOURCE)
    project.write("util.py", "def f(flag):\n    if flag:\n        return 1\n")
    before = project.snapshot()
    result = rewrite(project)
    assert {f.status for f in result.files} <= {"unchanged", "skipped"}
    assert project.snapshot() == before


# ---- indentation -------------------------------------------------------------------------------

@pytest.mark.parametrize("indent", ["\t", "  "], ids=["tabs", "two-spaces"])
def test_other_indentation_still_parses(project: Project, indent: str) -> None:
    project.pyproject()
    source = MODEL.replace("    ", indent)
    path = project.write("model.py", source)

    rewrite(project)

    text = path.read_text()
    compile(text, "model.py", "exec")
    assert "use_act: Optional[bool] = None" in text
    indented = [line for line in text.splitlines() if line[:1].isspace()]
    other = "    " if indent == "\t" else "\t"
    assert indented and all(line.startswith(indent) for line in indented)
    assert not any(line.startswith(other) for line in indented), "indentation styles mixed"
    # The lifted preamble sits at forward()'s body depth.
    lines = text.splitlines()
    guard = next(i for i, line in enumerate(lines) if "is None:" in line)
    assert lines[guard] == indent * 2 + "if use_act is None:"
    assert lines[guard + 1] == indent * 3 + "use_act = self.use_act"



def test_black_edits_outside_the_touched_lines_are_dropped() -> None:
    from tsfix.codemods.pipeline.rewrite import format_touched_lines

    old = ("class Beamformer(Base):\n"
           "    def forward(\n"
           "        self,\n"
           "        mix,\n"
           "        eps=1e-8,\n"
           "    ):\n"
           "        return mix\n")
    new = old.replace("eps=1e-8", "eps: float=1e-8")
    formatted = format_touched_lines(old, new, 88)
    # black formats the touched line, but does not get to add a blank line after `class`.
    assert formatted == old.replace("eps=1e-8", "eps: float = 1e-8")


FORMATTING_MODULE = '''\
import torch


def helper( x ):
    return x


class Net(torch.nn.Module):
    scale=2

    @torch.jit.unused
    def debug( self ):
        return 1

    def forward(self, x, flag=None):
        return x*self.scale

    def step( self, x ):
        """Docstring."""
        def inner( y ):
            return y
        z=inner( x )

        return z*2


class Other(torch.nn.Module):
    def forward( self, x ):
        return x
'''


@pytest.mark.parametrize(("old_line", "new_line"), [
    # inside a method: formatted under a stand-in class line
    ("    def forward(self, x, flag=None):",
     "    def forward(self, x, flag: Optional[bool]=None):"),
    # a class-level statement: the whole class is formatted
    ("    scale=2", "    scale: int=2"),
    # a line in a method's body
    ("        return x*self.scale", "        return x*self.scale+0"),
    # a method's body statements alone, under a stand-in class and def line
    ("        z=inner( x )", "        z=inner( x )+1"),
    ("            return y", "            return y+1"),
    ("        return z*2", "        return z*3"),
    ("        z=inner( x )\n\n        return z*2", "        z=inner( x )+1\n\n        return z*3"),
    # a docstring: the method whole (alone under a stand-in def it would be the def's)
    ('        """Docstring."""', '        """Docstring. """'),
])
def test_touched_statements_are_formatted_alone_as_black_would_format_the_file(
        old_line: str, new_line: str) -> None:
    # Speed: black reformats only the touched method (or class) by itself; the result must be
    # what black's own lines= mode gives on the whole file.
    import black
    from tsfix.codemods.pipeline.rewrite import format_touched_lines, touched_line_ranges

    old = FORMATTING_MODULE
    new = old.replace(old_line, new_line)
    ranges = touched_line_ranges(old, new)
    whole_file = black.format_str(new, mode=black.Mode(line_length=88), lines=ranges)
    formatted = format_touched_lines(old, new, 88)
    assert formatted == whole_file
    assert formatted != new                      # the touched line was formatted ...
    for untouched in ("def helper( x ):", "    def debug( self ):", "    def forward( self, x ):",
                      "    def step( self, x ):"):
        assert untouched in formatted            # ... and nothing else was


def test_a_touched_body_statement_is_formatted_with_the_one_before_not_the_whole_method(
) -> None:
    import ast

    from tsfix.codemods.pipeline.rewrite import _formatting_units, touched_line_ranges

    old = FORMATTING_MODULE
    new = old.replace("        return z*2", "        return z*3")
    ranges = touched_line_ranges(old, new)
    units = [unit for node in ast.parse(new).body for unit in _formatting_units(node, ranges)
             if any(a <= unit[1] and unit[0] <= b for a, b in ranges)]
    lines = new.splitlines()
    assert [lines[first - 1:last] for first, last, _ in units] == [
        ["        z=inner( x )", "", "        return z*3"]]
    # the first statement of a body keeps the method whole (blank lines after a def line)
    new = old.replace('        """Docstring."""', '        """Docstring. """')
    ranges = touched_line_ranges(old, new)
    units = [unit for node in ast.parse(new).body for unit in _formatting_units(node, ranges)
             if any(a <= unit[1] and unit[0] <= b for a, b in ranges)]
    assert [new.splitlines()[first - 1] for first, _, _ in units] == ["    def step( self, x ):"]
