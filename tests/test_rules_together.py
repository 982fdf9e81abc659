"""Several rules rewriting one class: validated once together, and when the combination is
rejected, the rule whose rewrite broke it is dropped (engine.py's docstring has the algorithm).

The rules here are test-only (registered by monkeypatching the registry) so that the outcome
does not depend on the real rules. Validation starts real workers, hence ``slow``.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Sequence

import libcst as cst
import pytest
from conftest import Project, file_record, no_traceback
from tsfix.codemods.rules import registry
from tsfix.codemods.rules.base import ClassChange, Rule

pytestmark = pytest.mark.slow

MODEL = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x) * 2.0
""")
EXAMPLES = {"model.py:Net": {"inputs": ["randn(2, 4)"]}}


def inserting(rule_name: str, statement: str, notes: Sequence[str] = (),
              only: str | None = None) -> type[Rule]:
    """A rule that inserts ``statement`` at the start of every forward() (of class ``only``)."""

    class Insert(Rule):
        name = rule_name
        summary = f"insert {statement!r} into forward()"

        def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
            if only is not None and cls.name.value != only:
                return cls
            body = list(cls.body.body)
            for i, node in enumerate(body):
                if isinstance(node, cst.FunctionDef) and node.name.value == "forward":
                    added = cst.parse_statement(statement + "\n")
                    body[i] = node.with_changes(body=node.body.with_changes(
                        body=[added, *node.body.body]))
                    self.changes.append(ClassChange(self.name, cls.name.value,
                                                    self.span_of(cls), self.summary,
                                                    notes=list(notes)))
                    return cls.with_changes(body=cls.body.with_changes(body=body))
            return cls

    return Insert


GOOD = inserting("good", "x = x * 1.0", notes=["multiplies by one"])
BAD = inserting("bad", "x = x * 3.0")          # eager parity fails


@pytest.fixture
def register(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    def apply(*rules: type[Rule]) -> None:
        monkeypatch.setattr(registry, "ALL_RULES", {rule.name: rule for rule in rules})
    return apply


@pytest.mark.parametrize("order", ["good-first", "bad-first"])
def test_the_rule_that_breaks_the_class_is_dropped(project: Project, register: Callable[..., None],
                                                   order: str) -> None:
    register(*((GOOD, BAD) if order == "good-first" else (BAD, GOOD)))
    project.pyproject(EXAMPLES)
    project.write("model.py", MODEL)

    # -v: the model's file's class lines (without it the model's line stands for them).
    result = project.cli("apply", "-j", "1", "-v", "--report", "report.json", ".")

    no_traceback(result)
    assert result.exit_code == 3, result.output           # a rewrite was rejected
    text = project.bytes("model.py").decode()
    assert "x = x * 1.0" in text and "x = x * 3.0" not in text
    report = json.loads(project.bytes("report.json"))
    record = file_record(report, "model.py")
    assert record["status"] == "changed" and record["written"] is True
    by_rule = {c["rule"]: c for c in record["classes"]}
    assert set(by_rule) == {"good", "bad"}
    assert by_rule["good"]["verdict"] == "verified" and by_rule["good"]["written"] is True
    assert by_rule["good"]["notes"] == ["multiplies by one"]
    bad = by_rule["bad"]
    assert bad["verdict"] == "rejected" and bad["written"] is False
    assert bad["reason"].startswith("dropped: Net validates without this rule's rewrite; "
                                    "with it: eager parity: ")
    # Registry order in the report, and the CLI names the rule of each line.
    assert [c["rule"] for c in record["classes"]] == list(registry.ALL_RULES)
    assert "model.py:5: Net [good] verified" in result.stderr
    assert "model.py:5: Net [bad] rejected: dropped: Net validates" in result.stderr
    assert "    note: multiplies by one" in result.stderr


def test_when_each_rule_alone_verifies_the_last_one_is_dropped(
        project: Project, register: Callable[..., None]) -> None:
    # Each alone scripts; together `t` is an int, then a float in a branch: re-script fails.
    first = inserting("first", "if bool(x.sum() > 1e9):\n    t = 2.0")
    second = inserting("second", "t = 1")
    register(first, second)
    project.pyproject(EXAMPLES)
    project.write("model.py", MODEL)

    result = project.run(jobs=1)

    text = project.bytes("model.py").decode()
    assert "t = 2.0" in text and "t = 1\n" not in text
    [record] = result.files
    verdicts = {c.rule: c for c in record.classes}
    assert verdicts["first"].verdict == "verified", verdicts["first"].reason
    assert verdicts["second"].verdict == "rejected"
    assert "with it: re-script: " in verdicts["second"].reason


def test_when_no_single_drop_verifies_the_class_is_held_back(
        project: Project, register: Callable[..., None]) -> None:
    register(BAD, inserting("worse", "x = x * 5.0"))
    project.pyproject(EXAMPLES)
    project.write("model.py", MODEL)

    result = project.run(jobs=1)

    assert project.bytes("model.py") == MODEL.encode()
    [record] = result.files
    assert record.status == "rejected"
    assert [c.verdict for c in record.classes] == ["rejected", "rejected"]
    assert all(c.reason.startswith("eager parity: ") for c in record.classes)
    assert result.exit_code == 3


def test_one_validation_entry_per_class(project: Project, register: Callable[..., None]) -> None:
    # Two rules, both fine: one verdict, shared by both rules' records.
    register(GOOD, inserting("also-good", "x = x + 0.0"))
    project.pyproject(EXAMPLES)
    project.write("model.py", MODEL)

    result = project.run(jobs=1)

    [record] = result.files
    assert [(c.rule, c.verdict) for c in record.classes] == [("good", "verified"),
                                                             ("also-good", "verified")]
    assert record.classes[0].reason == record.classes[1].reason
    text = project.bytes("model.py").decode()
    assert "x = x * 1.0" in text and "x = x + 0.0" in text
    assert result.exit_code == 0


def test_class_rejected_for_another_class_sake_keeps_every_rule(
        project: Project, register: Callable[..., None]) -> None:
    # Other's rewrite by "breaking" makes the file fail to import, which rejects Net too. Net
    # with both of its rules verifies once Other is held back, so no rule is dropped from Net;
    # Other verifies without "breaking".
    breaking = inserting("breaking", "x = x * 1.0", only="Other")

    class BreakImport(breaking):  # type: ignore[misc, valid-type]
        def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
            new = super().rewrite_class(cls)
            if new is cls:
                return cls
            raising = cst.parse_statement("_ = no_such_name\n")
            return new.with_changes(body=new.body.with_changes(
                body=[raising, *new.body.body]))

    register(GOOD, inserting("also-good", "x = x + 0.0", only="Net"), BreakImport)
    project.pyproject({**EXAMPLES, "model.py:Other": {"inputs": ["randn(2, 4)"]}})
    other = MODEL.split("\n\n\n", 1)[1].replace("class Net", "class Other")
    source = MODEL + "\n\n" + other
    project.write("model.py", source)

    result = project.run(jobs=1)

    [record] = result.files
    verdicts = {(c.class_name, c.rule): c for c in record.classes}
    assert verdicts["Net", "good"].verdict == "verified", verdicts["Net", "good"].reason
    assert verdicts["Net", "also-good"].verdict == "verified"
    assert verdicts["Other", "good"].verdict == "verified"
    dropped = verdicts["Other", "breaking"]
    assert dropped.verdict == "rejected"
    assert dropped.reason.startswith("dropped: Other validates without this rule's rewrite; "
                                     "with it: the rewritten file does not import")
    text = project.bytes("model.py").decode()
    assert "no_such_name" not in text
    assert text.count("x = x * 1.0") == 2 and text.count("x = x + 0.0") == 1


# TorchScript stops in scale, past forward's body (where the rules insert).
STOPPED = MODEL.replace("        return self.fc(x) * 2.0\n", """\
        return self.scale(self.fc(x))

    def scale(self, y):
        return getattr(self, "f" + "c")(y) * 0.0 + y * 2.0
""")


@pytest.mark.parametrize(("second", "stops", "trials"), [
    # Neither rule gets past scale's getattr: TorchScript stops both texts there, so leaving
    # one rule out cannot make Net script.
    ("x = x + 0.0", " where the original stops", 0),
    # This one makes TorchScript stop earlier, in forward, at the same message as scale's:
    # not the original's error, so without it Net might script, and each rule is left out
    # once (neither drop scripts: scale's getattr stays).
    ("unused = getattr(self, 'f' + 'c')", "", 2),
])
def test_a_class_gets_trials_unless_it_stops_at_the_originals_error(
        project: Project, register: Callable[..., None], second: str, stops: str,
        trials: int) -> None:
    register(GOOD, inserting("second", second))
    project.pyproject(EXAMPLES)
    project.write("model.py", STOPPED)

    result = project.run(jobs=1, allow_unscriptable=True)

    [record] = result.files
    assert [c.verdict for c in record.classes] == ["unverified", "unverified"]
    assert all(f"the class still does not script{stops}: RuntimeError: getattr" in c.reason
               for c in record.classes), record.classes
    assert result.phase_items.get("trials", 0) == trials, result.phase_items
    assert ("trials" in result.phase_s) == bool(trials), result.phase_s
    assert result.phase_items["rewrite"] == 1, result.phase_items
