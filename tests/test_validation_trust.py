"""Validation verdicts that must not mislead (issue 15): a lift that one artifact cannot serve
is rejected even in eager mode, a new TorchScript error is a rejection, a package that fails
to import is the model's problem, one scripting failure does not hide another's real error,
and a crashed worker says what happened in that file only.

Every test here starts real validation workers (each imports torch), hence ``slow``.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest
from conftest import Project
from tsfix.codemods.pipeline.config import parse_example
from tsfix.codemods.rules import registry
from tsfix.codemods.rules.base import ClassChange, Rule
from tsfix.codemods.validation.pool import (
    JobClass,
    ObserveClass,
    ObserveJob,
    ValidationJob,
    WorkerPool,
    run_jobs,
)
from tsfix.codemods.validation.protocol import Example

pytestmark = pytest.mark.slow


def example(key: str, table: dict[str, object]) -> Example:
    return parse_example(key, table).to_example()


def validate_all(*jobs: tuple[Path, str, JobClass]) -> list[tuple[str, str]]:
    """Each (original file, rewritten source, class) validated in one worker, in order: the
    verdict and reason of each."""
    verdicts = run_jobs([ValidationJob(i, str(path.resolve()), source, (job_class,))
                         for i, (path, source, job_class) in enumerate(jobs)],
                        workers=1, timeout=120)
    return [(v.verdict, v.reason) for i in range(len(jobs)) for v in verdicts[i]]


FLAG_TABLE = {"init": [{"use_act": True}, {"use_act": False}], "inputs": ["randn(2, 4)"]}


# ---- item 2: the one-artifact check runs in eager mode too ---------------------------------------

# Does not script (numpy in forward), before or after the lift.
UNSCRIPTABLE = textwrap.dedent("""\
    from typing import Optional

    import numpy as np
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.use_act = use_act

        def forward(self, x):
            x = x * torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)
            return self.act(x)

        def act(self, x):
            if self.use_act:
                x = torch.relu(x)
            return x
""")

# The lift forgets the helper: the argument changes nothing.
UNSCRIPTABLE_WRONG_LIFT = UNSCRIPTABLE.replace(
    "    def forward(self, x):\n",
    "    def forward(self, x, use_act: Optional[bool] = None):\n"
    "        if use_act is None:\n"
    "            use_act = self.use_act\n")
# The right lift: the helper takes the value.
UNSCRIPTABLE_RIGHT_LIFT = UNSCRIPTABLE_WRONG_LIFT.replace(
    "return self.act(x)", "return self.act(x, use_act)").replace(
    "def act(self, x):", "def act(self, x, use_act: bool):").replace(
    "if self.use_act:", "if use_act:")


def test_eager_one_artifact_rejects_a_lift_of_a_class_that_does_not_script(
        tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(UNSCRIPTABLE)
    spec = example("model.py:Net", FLAG_TABLE)
    lifted = {"use_act": "use_act"}

    job_class = JobClass("Net", spec, ("lift-branch",), lifted)

    wrong, right = validate_all((path, UNSCRIPTABLE_WRONG_LIFT, job_class),
                                (path, UNSCRIPTABLE_RIGHT_LIFT, job_class))

    verdict, reason = wrong
    assert verdict == "rejected", reason
    assert reason.startswith("one artifact (eager): output: max abs diff ")
    assert reason.endswith(" for init[1] called with {'use_act': False}")
    verdict, reason = right
    assert verdict == "unverified", reason
    assert reason.startswith("eager parity holds, but the class does not script before or "
                             "after this rewrite")
    assert reason.endswith("; one artifact served 2 of 2 calls in eager mode")


# Outer builds Inner from the flag: init[1] differs from init[0] in inner.causal only because
# of causal, so one artifact must serve it, and the lift of causal cannot.
DERIVED = textwrap.dedent("""\
    from typing import Optional

    import torch
    import torch.nn as nn


    class Inner(nn.Module):
        def __init__(self, causal: bool = False):
            super().__init__()
            self.causal = causal

        def forward(self, x):
            if self.causal:
                return x.cumsum(-1)
            return x


    class Outer(nn.Module):
        def __init__(self, causal=False):
            super().__init__()
            self.causal = causal
            self.inner = Inner(causal=causal)

        def forward(self, x):
            if self.causal:
                x = x * 2
            return self.inner(x)
""")
DERIVED_LIFT = DERIVED.replace(
    "    def forward(self, x):\n        if self.causal:\n            x = x * 2\n",
    "    def forward(self, x, causal: Optional[bool] = None):\n"
    "        if causal is None:\n"
    "            causal = self.causal\n"
    "        if causal:\n"
    "            x = x * 2\n")
assert DERIVED_LIFT != DERIVED
CAUSAL_TABLE = {"init": [{"causal": False}, {"causal": True}], "inputs": ["randn(2, 4)"]}


def test_a_configuration_differing_in_values_derived_from_the_lifted_flag_is_evidence(
        tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(DERIVED)
    job_class = JobClass("Outer", example("model.py:Outer", CAUSAL_TABLE), ("lift-branch",),
                         {"causal": "causal"})
    # Inner does not read its causal: the same artifact then serves both.
    inner_reads = "        if self.causal:\n            return x.cumsum(-1)\n"
    harmless = DERIVED.replace(inner_reads, "")
    assert harmless != DERIVED
    path_ok = tmp_path / "ok.py"
    path_ok.write_text(harmless)
    harmless_lift = DERIVED_LIFT.replace(inner_reads, "")

    # A flag that decides which parameters exist cannot be served by one instance.
    structural = DERIVED.replace("self.inner = Inner(causal=causal)",
                                 "self.inner = Inner(causal=causal)\n"
                                 "        self.proj = nn.Linear(4, 4) if causal else None")
    path_structural = tmp_path / "structural.py"
    path_structural.write_text(structural)
    structural_lift = DERIVED_LIFT.replace("self.inner = Inner(causal=causal)",
                                           "self.inner = Inner(causal=causal)\n"
                                           "        self.proj = nn.Linear(4, 4) if causal "
                                           "else None")

    (verdict, reason), (verdict_ok, reason_ok), (verdict_structural, reason_structural) = \
        validate_all((path, DERIVED_LIFT, job_class), (path_ok, harmless_lift, job_class),
                     (path_structural, structural_lift, job_class))

    assert verdict == "rejected", reason
    assert reason.startswith("one artifact (eager): output: max abs diff ")
    assert reason.endswith(" for init[1] called with {'causal': True}")
    assert verdict_ok == "verified", reason_ok
    assert "one artifact served 2 of 2" in reason_ok and "not comparable" not in reason_ok
    assert (verdict_structural, reason_structural) == (
        "rejected", "one artifact: init[1] differs from init[0] only in the lifted causal and "
                    "has other parameters or shapes: one instance cannot serve both (a "
                    "structural setting)")


# ---- item 10: one scripting failure leaves nothing behind for the next -------------------------

LAYERS = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class Block(nn.Module):
        def forward(self, x):
            return x * torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)
""")

# Net uses Block from another file (one class object for the original and the rewrite), and
# Inner from its own file (validated itself after Outer, which contains it).
USES_BLOCK = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn

    from layers import Block


    class Net(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.use_act = use_act
            self.block = Block()

        def forward(self, x):
            if self.use_act:
                x = torch.relu(x)
            return self.block(x)


    class Inner(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.use_act = use_act

        def forward(self, x):
            if self.use_act:
                x = torch.relu(x)
            return x * torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)


    class Outer(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.use_act = use_act
            self.inner = Inner()

        def forward(self, x):
            if self.use_act:
                x = x * 2
            return self.inner(x)
""")


def _lift_all(source: str) -> str:
    source = source.replace("    def forward(self, x):\n        if self.use_act:\n",
                            "    def forward(self, x, use_act: Optional[bool] = None):\n"
                            "        if use_act is None:\n"
                            "            use_act = self.use_act\n"
                            "        if use_act:\n")
    return "from typing import Optional\n\n" + source


def test_a_scripting_failure_does_not_hide_the_next_ones_real_error(tmp_path: Path) -> None:
    (tmp_path / "layers.py").write_text(LAYERS)
    path = tmp_path / "model.py"
    path.write_text(USES_BLOCK)
    lifted = {"use_act": "use_act"}
    classes = tuple(JobClass(name, example(f"model.py:{name}", FLAG_TABLE), ("lift-branch",),
                             lifted) for name in ("Net", "Outer", "Inner"))

    [verdicts] = run_jobs([ValidationJob(0, str(path), _lift_all(USES_BLOCK), classes)],
                          workers=1, timeout=120).values()

    hanning = ("RuntimeError: Python builtin <built-in function array> is currently not "
               "supported in Torchscript")
    for v in verdicts:
        assert v.verdict == "unverified", (v.name, v.reason)
        # The same error at the same code (Outer and Inner get there by callers lift-branch
        # changed).
        assert v.reason.startswith(
            "eager parity holds, but the class does not script before or after this rewrite: "
            f"the class still does not script where the original stops: {hanning}"), (
            v.name, v.reason)
        assert f"(the original fails with: {hanning}" in v.reason, (v.name, v.reason)
        assert "redefine" not in v.reason


# ---- item 3 (issue 25 item 3): a TorchScript error is new only when the original scripted -------

HIDDEN = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self, size=4):
            super().__init__()
            self.size = size

        def forward(self, x, return_hidden: bool = False):
            out = x * 2
            h = x + 1
            if return_hidden:
                return out, h
            return out


    class Top(nn.Module):
        def forward(self, x):
            x = x * np.float32(0.5)
            return self.window(x)

        def window(self, x):
            return x * torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)
""")
# annotate typed the return from the example calls, which only used the default.
WRONG_RETURN = HIDDEN.replace("return_hidden: bool = False):",
                              "return_hidden: bool = False) -> torch.Tensor:")
# numpy-to-torch: Top gets past its first error, then fails in window(), which it did not
# change.
TRANSLATED = HIDDEN.replace("x = x * np.float32(0.5)", "x = x * 0.5")


def test_an_error_after_the_originals_is_no_regression_whichever_comes_first(
        tmp_path: Path) -> None:
    """Neither original scripts, so neither rewrite breaks what compiled: both are unverified
    with the rewrite's own error, whether that error is new (Net: annotate's wrong return) or
    was there behind the original's first one (Top). Guessing which (issue 25 item 3) made a
    second run decide otherwise."""
    path = tmp_path / "model.py"
    path.write_text(HIDDEN)
    table = {"init": [{}], "inputs": ["randn(2, 4)"]}
    net = JobClass("Net", example("model.py:Net", table), ("annotate",))
    top = JobClass("Top", example("model.py:Top", table), ("numpy-to-torch",))

    (verdict, reason), (verdict_top, reason_top) = validate_all((path, WRONG_RETURN, net),
                                                                (path, TRANSLATED, top))

    assert (verdict, reason) == (
        "unverified",
        "eager parity holds, but the class does not script before or after this rewrite: the "
        "class still does not script: RuntimeError: Return value was annotated as having type "
        "Tensor but is actually of type Tuple[Tensor, Tensor] (at the rewritten model.py line "
        "15) (the original fails with: RuntimeError: Previous return statement returned a "
        "value of type Tuple[Tensor, Tensor] but this return statement returns a value of "
        "type Tensor (at model.py line 16)); one artifact served 1 of 1 calls in eager mode")
    assert verdict_top == "unverified", reason_top
    assert reason_top.startswith(
        "eager parity holds, but the class does not script before or after this rewrite: the "
        "class still does not script: RuntimeError: Python builtin <built-in function array> "
        "is currently not supported in Torchscript"), reason_top
    assert "(the original fails with: " in reason_top
    assert "Can't get source for <class 'numpy.float32'>" in reason_top


# The issue-18 case: forward fails first on something no rule fixes (**kwargs), so scripting
# never reaches the helper annotate typed wrongly; the rewrite's first error is the original's.
BEHIND_KWARGS = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self, size=4):
            super().__init__()
            self.proj = nn.Linear(size, size)

        def forward(self, x, **kwargs):
            scale = kwargs.get("scale", 1.0)
            return self.encode(x * scale)

        def encode(self, x, return_hidden=False):
            h = self.proj(x)
            out = torch.relu(h)
            if return_hidden:
                return out, h
            return out

        def shifted(self, x):
            return x + 1
""")
BEHIND_WRONG_RETURN = BEHIND_KWARGS.replace(
    "def encode(self, x, return_hidden=False):",
    "def encode(self, x, return_hidden: bool = False) -> torch.Tensor:")
TOP = textwrap.dedent("""\


    class Top(nn.Module):
        def __init__(self, size=4):
            super().__init__()
            self.net = Net(size)

        def forward(self, x):
            return self.net(x)
""")
# Right types on the helper; a wrong return type on a method forward never calls, which
# TorchScript never compiles: nothing new.
BEHIND_RIGHT = BEHIND_KWARGS.replace(
    "def encode(self, x, return_hidden=False):",
    "def encode(self, x, return_hidden: bool = False):").replace(
    "def shifted(self, x):", "def shifted(self, x) -> int:")


def test_an_error_behind_the_originals_first_one_is_unverified(tmp_path: Path) -> None:
    """The wrong return annotate wrote on a helper that scripting reaches only past the
    original's first error is no regression: the class never scripted. Its eager parity holds,
    and the reason names the rewrite's own error (before issue 25 each changed helper was
    compiled on its own and this was rejected)."""
    path = tmp_path / "model.py"
    path.write_text(BEHIND_KWARGS)
    net = JobClass("Net", example("model.py:Net", {"init": [{}], "inputs": ["randn(2, 4)"]}),
                   ("annotate",))

    (wrong, wrong_reason), (right, right_reason) = validate_all(
        (path, BEHIND_WRONG_RETURN, net), (path, BEHIND_RIGHT, net))

    variable = ("NotSupportedError: Compiled functions can't take variable number of "
                "arguments")
    for verdict, reason in ((wrong, wrong_reason), (right, right_reason)):
        assert verdict == "unverified", reason
        assert reason.startswith(
            "eager parity holds, but the class does not script before or after this rewrite: "
            f"the class still does not script where the original stops: {variable}"), reason
        assert f"(the original fails with: {variable}" in reason, reason


class _WrongReturnRule(Rule):
    """Test-only: writes the annotation the issue saw annotate write from one configuration's
    observed return (``encode(...) -> torch.Tensor`` on a method that returns a tuple under
    ``return_hidden=True``); annotate itself no longer does."""

    name = "wrong-return"
    summary = "test rule annotating Net.encode's return as a Tensor"

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if cls.name.value != "Net" or not isinstance(cls.body, cst.IndentedBlock):
            return cls
        body = [node.with_changes(returns=cst.Annotation(cst.parse_expression("torch.Tensor")))
                if isinstance(node, cst.FunctionDef) and node.name.value == "encode" else node
                for node in cls.body.body]
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        self.summary))
        return cls.with_changes(body=cls.body.with_changes(body=body))


def test_a_model_job_decides_an_error_behind_the_originals_first_one_alike(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    # Net cannot be built with defaults (no guessed input): only the model that holds it
    # judges its rewrite, as the class job does (no regression: the original never scripted).
    monkeypatch.setattr(registry, "ALL_RULES", {"wrong-return": _WrongReturnRule})
    project.pyproject({"model.py:Top": {"init": [{}], "inputs": ["randn(2, 4)"]}})
    project.write("model.py", BEHIND_KWARGS.replace("def __init__(self, size=4):",
                                                    "def __init__(self, size):") + TOP)

    result = project.run(rules=["wrong-return"], mode="diff", allow_unscriptable=True)

    [net] = [c for c in result.files[0].classes if c.class_name == "Net"]
    assert net.verdict == "unverified", net.reason
    assert net.reason.startswith("eager parity holds, but the class does not script before or "
                                 "after this rewrite: the class still does not script "
                                 "where the original stops: NotSupportedError: Compiled "
                                 "functions can't take variable number of arguments"), net.reason
    assert net.reason.endswith("(inputs from model model.py:Top)"), net.reason


# ---- item 9: a package that fails to import is the model's problem -------------------------------

LAZY_INIT = textwrap.dedent("""\
    import sys
    import types


    class LazyModule(types.ModuleType):
        \"\"\"Like speechbrain's: any attribute imports the target, which fails here.\"\"\"

        def __getattr__(self, name):
            raise ImportError(f"Lazy import of {self.__name__} failed")


    sys.modules["lazypkg.integrations"] = LazyModule("lazypkg.integrations")
""")


def _lifted(source: str) -> str:
    """lift-branch's rewrite of ``conftest.model_source``'s classes."""
    return "from typing import Optional\n" + source.replace(
        "    def forward(self, x):\n",
        "    def forward(self, x, use_act: Optional[bool] = None):\n"
        "        if use_act is None:\n"
        "            use_act = self.use_act\n").replace("if self.use_act:", "if use_act:")


def test_a_package_that_fails_to_import_is_unverified_not_an_internal_error(
        tmp_path: Path) -> None:
    from conftest import model_source

    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg" / "__init__.py").write_text("import not_installed_dependency_xyz\n")
    (tmp_path / "lazypkg").mkdir()
    (tmp_path / "lazypkg" / "__init__.py").write_text(LAZY_INIT)
    source = model_source() + "\n\n" + model_source("Other")
    spec = example("model.py:Net", FLAG_TABLE)
    jobs, observe = [], []
    for i, package in enumerate(["brokenpkg", "lazypkg"]):
        path = tmp_path / package / "model.py"
        path.write_text(source)
        classes = tuple(JobClass(name, spec, ("lift-branch",), {"use_act": "use_act"})
                        for name in ("Net", "Other"))
        jobs.append(ValidationJob(i, str(path), _lifted(source), classes))
        observe.append(ObserveJob(i, str(path), tuple(ObserveClass(name, spec)
                                                      for name in ("Net", "Other"))))

    with WorkerPool(1) as pool:
        verdicts = pool.validate(jobs, timeout=120)
        observed = pool.observe(observe, timeout=120)

    failed = ("importing the original failed: ModuleNotFoundError: No module named "
              "'not_installed_dependency_xyz'")
    assert [(v.name, v.verdict, v.reason) for v in verdicts[0]] == [
        ("Net", "unverified", failed), ("Other", "unverified", failed)]
    assert observed[0].failures == {"Net": failed, "Other": failed}
    # A module that raises on __file__ changes nothing for the file's classes.
    for v in verdicts[1]:
        assert v.verdict == "verified", (v.name, v.reason)
    assert observed[1].failures == {}
    assert observed[1].types["Net"]["forward"] == {"x": "Tensor", "return": "Tensor"}


# ---- item 11: a crash says what happened, in that file's own words -------------------------------

def test_a_crash_says_what_happened_and_quotes_only_its_own_output(tmp_path: Path) -> None:
    from conftest import model_source

    header = ["import ctypes", "import os"]
    bodies = {
        "a_chatty": ['for _ in range(2000):',
                     '    print("OUTPUT-FROM-a_chatty.py")'],
        "b_segv": ['print("b_segv is about to crash")',
                   "ctypes.string_at(0)"],
        "c_chatty": ['print("OUTPUT-FROM-c_chatty.py")'],
        "d_abort": ["os.abort()"],
        "e_exit": ["os._exit(3)"],
    }
    jobs = []
    for i, (name, lines) in enumerate(bodies.items()):
        source = model_source(header=header, forward_lines=lines)
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        jobs.append(ValidationJob(i, str(path), _lifted(source), (JobClass(
            "Net", example(f"{name}.py:Net", FLAG_TABLE), ("lift-branch",),
            {"use_act": "use_act"}),)))

    # One worker: every crash follows another file's output in the same worker's stderr.
    verdicts = run_jobs(jobs, workers=1, timeout=120)

    reasons = {name: verdicts[i][0].reason for i, name in enumerate(bodies)}
    assert verdicts[0][0].verdict == "verified", reasons["a_chatty"]
    assert reasons["b_segv"] == (
        "validation worker died: SIGSEGV (segmentation fault) in forward at b_segv.py line "
        "14; its last output: b_segv is about to crash")
    assert reasons["d_abort"] == ("validation worker died: SIGABRT (abort) in forward at "
                                  "d_abort.py line 13")
    assert reasons["e_exit"] == "validation worker died: exit code 3"
    for name in ("b_segv", "d_abort", "e_exit"):
        assert verdicts[list(bodies).index(name)][0].verdict == "unverified"
        assert "OUTPUT-FROM" not in reasons[name]


def test_death_reasons() -> None:
    from tsfix.codemods.validation.pool import death_reason

    assert death_reason(-9, "") == "validation worker died: SIGKILL (killed: out of memory?)"
    assert death_reason(-15, "bye\n") == "validation worker died: SIGTERM; its last output: bye"
    report = ('loading\nFatal Python error: Segmentation fault\n\n'
              'Thread 0x01 (most recent call first):\n'
              '  File "/elsewhere/other.py", line 3 in run\n\n'
              'Current thread 0x02 (most recent call first):\n'
              '  File "/tmp/tsfix-validate-ab12/net.py", line 9 in helper\n'
              '  File "/tmp/proj/net.py", line 5 in forward\n\n'
              'Extension modules: numpy (total: 1)\n')
    assert death_reason(-11, report) == (
        "validation worker died: SIGSEGV (segmentation fault) in helper at the rewritten "
        "net.py line 9; its last output: loading")


_DISPATCH = '''
from typing import Optional

import torch
from torch import nn


class Scaled(nn.Module):
    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        return x * 2 if lengths is None else x * lengths


class Shifted(nn.Module):
    def forward(self, x):
        return x + 1


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Shifted(), Scaled()])

    def forward(self, x, lengths: Optional[torch.Tensor] = None):
        for layer in self.blocks:
            if isinstance(layer, Scaled):
                x = layer(x, lengths=lengths)
            else:
                x = layer(x)
        return x
'''


@pytest.mark.slow
def test_isinstance_on_a_class_loaded_twice_under_one_name_takes_the_right_branch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The original and the rewrite are loaded under one module name; TorchScript resolved
    ``isinstance(layer, Scaled)`` in the second by the first's registered type and ran the
    other branch (typeerror-fallback's fixture was rejected for a parity difference)."""
    import importlib.util
    import sys

    import torch
    from tsfix.codemods.validation.worker import script

    x, lengths = torch.ones(3), torch.full((3,), 5.0)
    for version in range(2):
        path = tmp_path / f"v{version}.py"
        path.write_text(_DISPATCH)
        spec = importlib.util.spec_from_file_location("tsfix_same_name", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, "tsfix_same_name", module)
        spec.loader.exec_module(module)
        net = module.Net()
        torch.testing.assert_close(script(net)(x, lengths), net(x, lengths),
                                   rtol=1e-4, atol=1e-5, msg=version)


# ---- issue 25 item 6: the original and the rewrite as two modules to TorchScript --------------

# Pool declares overloads (no rule rewrites such a class); lift-branch rewrites Head above it,
# so the rewritten file defines Pool at another line under the module name the original has.
OVERLOADED = textwrap.dedent("""\
    from typing import List

    import torch
    import torch.nn as nn


    class Head(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.use_act = use_act

        def forward(self, x):
            if self.use_act:
                x = torch.relu(x)
            return x


    class Pool(nn.Module):
        @torch.jit._overload_method  # noqa: F811
        def pool(self, x):
            # type: (torch.Tensor) -> torch.Tensor
            pass

        @torch.jit._overload_method  # noqa: F811
        def pool(self, x):
            # type: (List[torch.Tensor]) -> torch.Tensor
            pass

        def pool(self, x):  # noqa: F811
            if isinstance(x, list):
                return torch.stack(x).mean(0) * 3
            return x * 2

        def forward(self, x):
            return self.pool(x) + self.pool([x, x])


    class Top(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.head = Head(use_act)
            self.pool = Pool()

        def forward(self, x):
            return self.pool(self.head(x))
""")


def test_overloaded_methods_of_a_file_whose_classes_moved_script_in_model_jobs(
        project: Project) -> None:
    table = {"init": [{"use_act": True}, {"use_act": False}], "inputs": ["randn(2, 4)"]}
    project.pyproject({"model.py:Top": table, "model.py:Head": table})
    project.write("model.py", OVERLOADED)

    result = project.run(rules=["lift-branch"], mode="diff")

    [head] = result.files[0].classes
    # Before: rejected, "the rewritten tree does not import: RuntimeError: Cannot currently
    # overload the same method name in two different classes with the same name in the same
    # module", and the model did not script after tsfix.
    assert head.verdict == "verified", head.reason
    [top] = [model for model in result.models() if model.model.endswith(":Top")]
    assert top.status == "scripts", top.reason


def test_a_file_with_overloaded_methods_validated_twice_in_one_worker(tmp_path: Path) -> None:
    """Two jobs of one file (the fix loop validates a file again) in one worker: the second
    rewrite defines Pool at another line than the first under the same module name."""
    path = tmp_path / "model.py"
    path.write_text(OVERLOADED)
    pool = JobClass("Pool", example("model.py:Pool", {"init": [{}], "inputs": ["randn(2, 4)"]}),
                    ("lift-branch",))
    moved = OVERLOADED.replace("class Pool(nn.Module):", "# moved\n\n\nclass Pool(nn.Module):")

    verdicts = validate_all((path, OVERLOADED.replace("* 3", "* 3.0"), pool),
                            (path, moved.replace("* 2", "* 2.0"), pool))

    assert [verdict for verdict, _ in verdicts] == ["verified", "verified"], verdicts


# A helper the user keeps in Python (@torch.jit.ignore): the original scripts and does not
# save ("Could not export Python function call"), and neither does the lifted rewrite.
IGNORED_HELPER = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self, use_act=True):
            super().__init__()
            self.use_act = use_act

        @torch.jit.ignore
        def scale(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        def forward(self, x):
            if self.use_act:
                x = torch.relu(x)
            return self.scale(x)
""")


def test_a_save_failure_the_original_has_too_is_not_counted_against_the_rewrite(
        tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_text(IGNORED_HELPER)
    net = JobClass("Net", example("model.py:Net", FLAG_TABLE), ("lift-branch",),
                   {"use_act": "use_act"})

    [(verdict, reason)] = validate_all((path, _lift_all(IGNORED_HELPER), net))

    assert verdict == "unverified", reason
    assert reason.startswith("save/load fails, and so does the original's: "), reason
    assert reason.count("Could not export Python function call 'scale'") == 2, reason
