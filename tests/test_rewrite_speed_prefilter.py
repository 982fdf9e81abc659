"""What the rewrite phase skips for speed never changes a result: the rewrite with the ast
prefilter (``may_apply``) gives the same text, changes, refusals and fixes as the rewrite with
every rule looking at every file; positions resolved without LibCST's ``MetadataWrapper`` are
LibCST's."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import find_all
from tsfix.codemods.pipeline.rewrite import PARSED, RewriteError, rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.base import ClassChange, Rule, _Positions
from tsfix.codemods.rules.registry import ALL_RULES

ROOT = Path(__file__).resolve().parent.parent

# The rules whose may_apply the speed work made precise (it reads what the rule reads).
PRECISE = ("none-module-test", "loop-carried-local", "constant-flag", "nested-function",
           "typeerror-fallback", "dtype-methods", "sum-tensors", "drop-variable",
           "variable-arguments")


def _files(*, torch_nn: bool = False) -> list[Path]:
    files = sorted((ROOT / "fixtures").rglob("*.py"))
    spec = importlib.util.find_spec("torch")     # torch's own modules, read, never imported
    if torch_nn and spec is not None and spec.origin is not None:
        files += sorted((Path(spec.origin).parent / "nn").rglob("*.py"))
    return files


def _outcome(text: str, settings: RewriteSettings, module: cst.Module | None = None) -> object:
    try:
        result = rewrite_source(text, settings, FileContext("file.py", module=module))
    except RewriteError as exc:
        return str(exc)
    return (result.text, [dataclasses.asdict(c) for c in result.changes],
            [dataclasses.asdict(s) for s in result.skips],
            [dataclasses.asdict(f) for f in result.fixes])


def _without_prefilter(monkeypatch: pytest.MonkeyPatch, rules: list[type[Rule]]) -> None:
    for rule in rules:
        monkeypatch.setattr(rule, "may_apply", classmethod(lambda cls, file: True))


def test_a_precise_prefilter_says_no_only_where_its_rule_finds_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Where may_apply says yes the rule runs as it would without the prefilter; where it says
    # no, the rule run all the same must find nothing.
    parsed = []
    for path in _files():
        text = path.read_text(encoding="utf-8")
        parsed.append((text, AstFile(text), cst.parse_module(text)))
    assert len(parsed) > 50
    for name in PRECISE:
        rule = ALL_RULES[name]
        settings = RewriteSettings([rule], unsafe_fixes=True)
        said_no = [(text, module) for text, file, module in parsed if not rule.may_apply(file)]
        assert 0 < len(said_no) < len(parsed), name
        with monkeypatch.context() as patch:
            _without_prefilter(patch, [rule])
            for text, module in said_no:
                assert _outcome(text, settings, module) == (text, [], [], []), name


@pytest.mark.slow       # every rule over every fixture and torch.nn module, twice: minutes
def test_the_prefilter_keeps_every_result_of_a_run_with_every_rule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rules = list(ALL_RULES.values())
    texts = [path.read_text(encoding="utf-8") for path in _files(torch_nn=True)]
    for settings in (RewriteSettings(rules), RewriteSettings(rules, unsafe_fixes=True)):
        with_prefilter = [_outcome(text, settings) for text in texts]
        with monkeypatch.context() as patch:
            _without_prefilter(patch, rules)
            assert [_outcome(text, settings) for text in texts] == with_prefilter


def _statements(module: cst.Module) -> Iterator[cst.ClassDef | cst.FunctionDef]:
    for statement in module.body:
        if isinstance(statement, cst.ClassDef | cst.FunctionDef):
            yield statement
        if isinstance(statement, cst.ClassDef) and isinstance(statement.body, cst.IndentedBlock):
            yield from (s for s in statement.body.body if isinstance(s, cst.FunctionDef))


def test_positions_are_libcsts() -> None:
    compared = 0
    for path in sorted((ROOT / "fixtures").rglob("*.in.py")):
        try:
            module = cst.parse_module(path.read_text(encoding="utf-8"))
        except cst.ParserSyntaxError:
            continue
        for statement in _statements(module):
            expected = MetadataWrapper(cst.Module(body=[statement]),
                                       unsafe_skip_copy=True).resolve(PositionProvider)
            found = _Positions(statement)
            nodes = {node for node in expected if not isinstance(node, cst.Module)}
            assert nodes == {node for node in found if not isinstance(node, cst.Module)}, path
            assert all(found[node] == expected[node] for node in nodes), path
            compared += 1
    assert compared > 500


def test_positions_across_line_breaks_inside_tokens() -> None:
    # A string token spanning lines, \r\n and lone \r line ends: the column restarts after each.
    text = 'class A:\r\n    def f(self):\r\n        x = """a\r\nbc"""; y = 1\r        return y\r\n'
    module = cst.parse_module(text)
    statement = module.body[0]
    assert isinstance(statement, cst.ClassDef)
    for node in (statement, *_statements(module)):
        expected = MetadataWrapper(cst.Module(body=[node]),
                                   unsafe_skip_copy=True).resolve(PositionProvider)
        found = _Positions(node)
        assert {n: found[n] for n in expected if not isinstance(n, cst.Module)} == {
            n: r for n, r in expected.items() if not isinstance(n, cst.Module)}


class _SeesCollector(Rule):
    name = "sees-collector"
    seen: list[bool] = []

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        _SeesCollector.seen.append(gc.isenabled())
        return cls


def test_the_cycle_collector_is_paused_for_a_file_and_left_as_it_was() -> None:
    text = ("import torch\n\nclass Net(torch.nn.Module):\n"
            "    def forward(self, x):\n        return x\n")
    _SeesCollector.seen = []
    assert gc.isenabled()
    rewrite_source(text, RewriteSettings([_SeesCollector]), "file.py")
    assert _SeesCollector.seen == [False]
    assert gc.isenabled()
    with pytest.raises(RewriteError):
        rewrite_source("class Net(:\n", RewriteSettings([_SeesCollector]), "file.py")
    assert gc.isenabled()       # a file that fails does not leave it paused
    gc.disable()                # a caller that paused it keeps it paused
    try:
        rewrite_source(text, RewriteSettings([_SeesCollector]), "file.py")
        assert not gc.isenabled()
    finally:
        gc.enable()


MODEL_WITH_FLAG = """\
import torch


class Net(torch.nn.Module):
    def __init__(self, use_bias=True):
        super().__init__()
        self.use_bias = use_bias

    def forward(self, x):
        if self.use_bias:
            return x + 1
        return x
"""


def test_a_text_rewritten_again_is_parsed_once_and_rewritten_alike(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Trials, final texts and repair rounds rewrite the same text with other skip sets.
    parsed: list[str] = []
    real = cst.parse_module

    def counting(text: str) -> cst.Module:
        parsed.append(text)
        return real(text)

    monkeypatch.setattr(cst, "parse_module", counting)
    PARSED.clear()
    texts = [MODEL_WITH_FLAG.replace("Net", name) for name in ("A", "B", "C")]
    settings = RewriteSettings([ALL_RULES["lift-branch"]])
    first = rewrite_source(texts[0], settings, "a.py")
    skipped = rewrite_source(texts[0], settings, FileContext("a.py", {"lift-branch": {"A"}}))
    again = rewrite_source(texts[0], settings, "a.py")
    assert first.changed and not skipped.changed
    assert (again.text, again.changes) == (first.text, first.changes)
    assert parsed == texts[:1]
    for text in texts[1:]:          # two texts are kept: the first is parsed again
        rewrite_source(text, settings, "b.py")
    rewrite_source(texts[0], settings, "a.py")
    assert parsed == [*texts, texts[0]]


TWO_RULES = MODEL_WITH_FLAG + """

class Gate(torch.nn.Module):
    def __init__(self, use_gate=True):
        super().__init__()
        self.use_gate = use_gate

    def forward(self, x: torch.Tensor, scale=2.0):
        if self.use_gate:
            return x * scale
        return x
"""


@pytest.mark.parametrize("run", ["run-1", ""])
def test_a_rewrite_again_in_a_run_starts_after_the_rules_that_skip_what_they_did(
        monkeypatch: pytest.MonkeyPatch, run: str) -> None:
    """A rule-drop trial leaves the last rule out for one class: the rules before it are not
    run again in the same run (RewriteSettings.run); the result is the one a rewrite from
    the first rule gives. Without a run, and in another run, every rule runs."""
    first_rule, last_rule = ALL_RULES["lift-branch"], ALL_RULES["annotate"]
    runs: list[str] = []
    for rule in (first_rule, last_rule):
        real = rule.transform_module

        def counting(self: Rule, module: cst.Module, real: object = real) -> cst.Module:
            runs.append(self.name)
            return real(self, module)  # type: ignore[operator]

        monkeypatch.setattr(rule, "transform_module", counting)
    settings = RewriteSettings([first_rule, last_rule], run=run)
    dropped = FileContext("m.py", {"annotate": frozenset({"Gate"})})
    first = rewrite_source(TWO_RULES, settings, "m.py")
    trial = rewrite_source(TWO_RULES, settings, dropped)
    assert runs == ["lift-branch", "annotate", "annotate"] if run else [
        "lift-branch", "annotate", "lift-branch", "annotate"]
    fresh = rewrite_source(TWO_RULES, dataclasses.replace(settings, run="run-2"), dropped)
    assert runs[-2:] == ["lift-branch", "annotate"]
    assert {c.rule for c in first.changes} == {"lift-branch", "annotate"}
    assert ("annotate", "Gate") in {(c.rule, c.class_name) for c in first.changes}
    assert ("annotate", "Gate") not in {(c.rule, c.class_name) for c in trial.changes}
    assert (trial.text, trial.changes, trial.skips, trial.fixes) == (
        fresh.text, fresh.changes, fresh.skips, fresh.fixes)
    if run:
        # A rewrite that parts from the first at its first rule does not hide the first
        # rewrite's steps from the next one.
        runs.clear()
        rewrite_source(TWO_RULES, settings, FileContext("m.py", {"lift-branch": {"Net"}}))
        other = FileContext("m.py", {"annotate": frozenset({"Net"})})
        again = rewrite_source(TWO_RULES, settings, other)
        assert runs == ["lift-branch", "annotate", "annotate"]
        assert again.text == rewrite_source(
            TWO_RULES, dataclasses.replace(settings, run="run-3"), other).text


@pytest.mark.parametrize("text", [
    "", "\n", "# only a comment\n", "x = 1", "x = 1\n\n\n# footer comment\n",
    "#!/usr/bin/env python\n# header\n\nimport torch\n\n\nclass A:\n\tdef f(self):\n"
    "\t\treturn 1\n",
    "class A:\r\n    x = 1\r\n", "if True:\n  y = 2\n# trailing\n", "x = 1\n   ",
])
def test_a_module_from_its_statements_code_is_libcsts_code(text: str) -> None:
    from tsfix.codemods.pipeline.rewrite import _StatementCode

    codegen = _StatementCode()
    module = cst.parse_module(text)
    assert codegen.of(module) == module.code == text
    # A statement rebuilt is generated again; the others are taken as they were.
    if module.body:
        changed = module.with_changes(body=[*module.body[:-1], cst.parse_statement("z = 3\n")])
        assert codegen.of(changed) == changed.code


class _GrowsTheClass(Rule):
    """Adds an import line above the class and two lines at the top of its body."""

    name = "grows-the-class"

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        grown = super().transform_module_impl(tree)
        return grown.with_changes(body=[cst.parse_statement("import os\n"), *grown.body])

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        assert isinstance(cls.body, cst.IndentedBlock)
        added = [cst.parse_statement("a = 1\n"), cst.parse_statement("b = 2\n")]
        self.changes.append(ClassChange(self.name, cls.name.value, (1, 1), "grown"))
        return cls.with_changes(body=cls.body.with_changes(body=[*added, *cls.body.body]))


class _RefusesReturns(Rule):
    name = "refuses-returns"

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        self.skip(cls.name.value, cls, "the class")
        for node in find_all(cls, cst.Return):
            self.skip(cls.name.value, node, "a return")
        return cls


def test_a_class_an_earlier_rule_rewrote_keeps_its_line_and_places_what_it_holds() -> None:
    # Lines after an earlier rule's rewrite: the class keeps its line in the file as the user
    # has it (the import added above it does not move it), what it holds is placed within
    # the class as rewritten (two lines further down: the lines the earlier rule added).
    text = ("import torch\n\n\nclass Net(torch.nn.Module):\n    def forward(self, x):\n"
            "        y = x + 1\n        return y\n")
    for rules in ([_RefusesReturns], [_GrowsTheClass, _RefusesReturns]):
        result = rewrite_source(text, RewriteSettings(rules), "file.py")
        shift = 2 if _GrowsTheClass in rules else 0
        assert [(s.reason, s.line, s.column) for s in result.skips] == [
            ("the class", 4, 1), ("a return", 7 + shift, 9)]


def test_columns_in_a_file_indented_by_two_spaces() -> None:
    # A method is placed alone, in a module of its file's indentation: with four spaces a
    # read two blocks deep would be reported 3 columns right of where it is.
    text = ("import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n"
            "  def __init__(self, mode='a'):\n    super().__init__()\n    self.mode = mode\n\n"
            "  def forward(self, x):\n    if x.sum() > 0:\n      if self.mode == 'a':\n"
            "        return x + 1\n    return x\n")
    assert text.splitlines()[11].index("self.mode") == 9
    result = rewrite_source(text, RewriteSettings([ALL_RULES["lift-branch"]]), "file.py")
    assert [(f.line, f.column) for f in result.fixes] == [(12, 10)]
