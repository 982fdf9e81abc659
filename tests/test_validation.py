"""Validation in worker processes: verdicts for good, crashing, hanging and odd models.

Every test here starts real validation workers (each imports torch), hence ``slow``.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest
from conftest import TWO_CONFIGS, Project, by_display, model_source
from tsfix.codemods.pipeline.config import parse_example
from tsfix.codemods.validation.pool import JobClass, ValidationJob, run_jobs

pytestmark = pytest.mark.slow

WORKER_HEADER = ["import os", "import time", "", "CALLS = [0]", ""]


def verdict_of(result, display: str, class_name: str = "Net", rule: str = "lift-branch"):
    # Other rules may change the class too; validation gives all of them one verdict.
    [c] = [c for c in by_display(result)[display].classes
           if c.class_name == class_name and c.rule == rule]
    return c


def lifted_on_disk(project: Project, relative: str) -> bool:
    text = project.bytes(relative).decode()
    return "use_act: Optional[bool] = None" in text and "if self.use_act:" not in text


def test_simple_model_with_two_configurations_is_verified(project: Project) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS,
                       "chatty.py:Net": TWO_CONFIGS})
    project.write("model.py", model_source(init_lines=["self.fc = nn.Linear(4, 4)"],
                                           forward_lines=["x = self.fc(x)"]))
    # User code printing to stdout must not disturb the worker's result channel.
    project.write("chatty.py", model_source(forward_lines=['print("hello from forward")',
                                                           'print("{\\"id\\": 99}")']))

    result = project.run()

    for name in ("model.py", "chatty.py"):
        c = verdict_of(result, name)
        assert c.verdict == "verified", (name, c.reason)
        assert "2 configuration(s)" in c.reason
        assert "served 2 of 2" in c.reason
        assert lifted_on_disk(project, name)
    assert result.exit_code == 0


def test_worker_crash_is_unverified_and_run_goes_on(project: Project) -> None:
    project.pyproject({f"{n}.py:Net": TWO_CONFIGS for n in ("a_good", "b_crash", "c_good")})
    project.write("a_good.py", model_source(header=WORKER_HEADER))
    project.write("b_crash.py", model_source(header=WORKER_HEADER,
                                             forward_lines=["os._exit(1)"]))
    project.write("c_good.py", model_source(header=WORKER_HEADER))

    # One worker: the crash must cost only b_crash.py, a replacement worker takes c_good.py.
    result = project.run(jobs=1)

    crashed = verdict_of(result, "b_crash.py")
    assert crashed.verdict == "unverified"
    assert "worker died" in crashed.reason and "exit code 1" in crashed.reason
    for name in ("a_good.py", "c_good.py"):
        c = verdict_of(result, name)
        assert c.verdict == "verified", (name, c.reason)
        assert lifted_on_disk(project, name)


def test_hang_times_out_as_unverified_and_run_goes_on(project: Project) -> None:
    project.pyproject({f"{n}.py:Net": TWO_CONFIGS for n in ("a_good", "b_hang", "c_good")})
    project.write("a_good.py", model_source(header=WORKER_HEADER))
    project.write("b_hang.py", model_source(header=WORKER_HEADER,
                                            forward_lines=["time.sleep(600)"]))
    project.write("c_good.py", model_source(header=WORKER_HEADER))

    started = time.monotonic()
    result = project.run(jobs=1, timeout=5)
    elapsed = time.monotonic() - started

    hung = verdict_of(result, "b_hang.py")
    assert hung.verdict == "unverified"
    assert "timed out" in hung.reason and "5s" in hung.reason
    for name in ("a_good.py", "c_good.py"):
        c = verdict_of(result, name)
        assert c.verdict == "verified", (name, c.reason)
    assert elapsed < 60  # the hung worker was killed, not waited for


def test_timeout_does_not_count_worker_startup(project: Project) -> None:
    # --timeout is "seconds allowed for validating one file". Validating this model takes
    # milliseconds; importing torch in a fresh worker must not eat the file's budget.
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    project.write("model.py", model_source())
    result = project.run(timeout=1)
    c = verdict_of(result, "model.py")
    assert c.verdict == "verified", c.reason


def test_nondeterministic_model_is_unverified(project: Project) -> None:
    project.pyproject({"model.py:Net": TWO_CONFIGS})
    # Output depends on how often forward ran: seeding cannot make two calls agree.
    project.write("model.py", model_source(header=WORKER_HEADER, forward_lines=[
        "CALLS[0] += 1", "x = x + CALLS[0]"]))
    result = project.run()
    c = verdict_of(result, "model.py")
    assert c.verdict == "unverified"
    assert "nondeterministic" in c.reason


FACTORY_MODEL = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Settings:
        def __init__(self, gain: float) -> None:
            self.gain = gain


    class Net(nn.Module):
        def __init__(self, settings, use_gain=True):
            super().__init__()
            self.gain = settings.gain
            self.use_gain = use_gain

        def forward(self, x, bias):
            if self.use_gain:
                x = x * 3.0
            return x + bias
""")

FACTORY_EXAMPLES = textwrap.dedent("""\
    import torch

    from factory_model import Settings


    def examples():
        x = torch.linspace(-1.0, 1.0, 6).reshape(2, 3)
        bias = torch.ones(3)
        return [({"settings": Settings(2.0), "use_gain": True}, (x,), {"bias": bias}),
                ({"settings": Settings(2.0), "use_gain": False}, (x,), {"bias": bias})]


    def broken():
        raise ValueError("factory blew up")
""")


def test_example_factory(project: Project) -> None:
    project.pyproject({"factory_model.py:Net": {"factory": "factory_examples:examples"},
                       "other_model.py:Net": {"factory": "factory_examples:broken"}})
    project.write("factory_model.py", FACTORY_MODEL)
    project.write("other_model.py", FACTORY_MODEL)
    project.write("factory_examples.py", FACTORY_EXAMPLES)

    result = project.run("factory_model.py", "other_model.py")

    good = verdict_of(result, "factory_model.py")
    assert good.verdict == "verified", good.reason
    assert "2 configuration(s)" in good.reason
    assert "use_gain: Optional[bool] = None" in project.bytes("factory_model.py").decode()

    failed = verdict_of(result, "other_model.py")
    assert failed.verdict == "unverified"
    assert "factory_examples:broken" in failed.reason and "factory blew up" in failed.reason


def test_package_relative_imports(project: Project) -> None:
    project.pyproject({"pkg/model.py:Net": {"init": [{"use_double": True},
                                                     {"use_double": False}],
                                            "inputs": ["randn(2, 4)"]}})
    project.write("pkg/__init__.py", "")
    project.write("pkg/layers.py", textwrap.dedent("""\
        import torch.nn as nn


        class Doubler(nn.Module):
            def forward(self, x):
                return x * 2
    """))
    project.write("pkg/model.py", textwrap.dedent("""\
        import torch.nn as nn

        from .layers import Doubler


        class Net(nn.Module):
            def __init__(self, use_double=True):
                super().__init__()
                self.use_double = use_double
                self.doubler = Doubler()

            def forward(self, x):
                if self.use_double:
                    x = self.doubler(x)
                return x
    """))

    result = project.run()

    c = verdict_of(result, "pkg/model.py")
    assert c.verdict == "verified", c.reason
    text = project.bytes("pkg/model.py").decode()
    assert "use_double: Optional[bool] = None" in text
    assert "from .layers import Doubler" in text


# ---- several calls per instance ----------------------------------------------------------------

TEMPERATURE_MODEL = textwrap.dedent("""\
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def __init__(self, scale=1.0):
            super().__init__()
            self.scale = scale

        def forward(self, x, temperature: float = 1.0):
            return x * self.scale / temperature
""")


def test_every_init_with_every_call(project: Project) -> None:
    """The worker checks init x calls; a rewrite wrong only for a non-default argument value
    is rejected, and the reason names the init and the call."""
    spec = parse_example("model.py:Net", {
        "init": [{"scale": 1.0}, {"scale": 2.0}],
        "calls": [{"inputs": ["randn(2, 3)"]},
                  {"inputs": ["randn(2, 3)"], "kwargs": {"temperature": 0.5}}],
    }).to_example()
    path = str(project.write("model.py", TEMPERATURE_MODEL).resolve())
    same = TEMPERATURE_MODEL.replace("return x", "y = x\n        return y")
    # Right for the default temperature only.
    ignores_temperature = TEMPERATURE_MODEL.replace("/ temperature", "/ 1.0")
    jobs = [ValidationJob(i, path, source, (JobClass("Net", spec, ("test",)),))
            for i, source in enumerate([same, ignores_temperature])]

    verdicts = run_jobs(jobs, workers=1, timeout=60)

    [good] = verdicts[0]
    assert good.verdict == "verified", good.reason
    assert "4 configuration(s) (2 init x 2 calls)" in good.reason
    assert "served 2 of 4" in good.reason  # init[1] differs in scale, which is not lifted
    [bad] = verdicts[1]
    assert bad.verdict == "rejected"
    assert bad.reason.startswith("eager parity: output: max abs diff")
    assert bad.reason.endswith("for init[0] {'scale': 1.0} call[1]")


# ---- Python-only artifacts (an ignored method) ---------------------------------------------------

WINDOW_MODEL = textwrap.dedent("""\
    import numpy as np
    import torch
    import torch.nn as nn


    class Net(nn.Module):
        def forward(self, x):
            window = torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)
            return x * window
""")

WINDOW_IGNORED = WINDOW_MODEL.replace(
    "        window = torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)\n",
    "        window = self._numpy_window(x)\n").replace(
    "        return x * window\n",
    "        return x * window\n"
    "\n"
    "    @torch.jit.ignore\n"
    "    def _numpy_window(self, x: torch.Tensor) -> torch.Tensor:\n"
    "        return torch.from_numpy(np.hanning(x.size(-1))).to(x.dtype)\n")
assert "_numpy_window(x)\n" in WINDOW_IGNORED


def test_python_only_rewrite_is_verified_when_save_fails(project: Project) -> None:
    """An ignored method scripts and runs, and cannot be saved: with ``python_only`` that save
    failure is expected and recorded; without it, it is a rejection."""
    spec = parse_example("model.py:Net", {"inputs": ["randn(2, 8)"]}).to_example()
    path = str(project.write("model.py", WINDOW_MODEL).resolve())
    jobs = [ValidationJob(i, path, WINDOW_IGNORED,
                          (JobClass("Net", spec, ("test",), python_only=python_only),))
            for i, python_only in enumerate([True, False])]

    verdicts = run_jobs(jobs, workers=1, timeout=60)

    [expected] = verdicts[0]
    assert expected.verdict == "verified", expected.reason
    assert "re-script, save fails as expected (a @torch.jit.ignore method runs in Python " \
           "only)" in expected.reason
    [unexpected] = verdicts[1]
    assert unexpected.verdict == "rejected"
    assert unexpected.reason.startswith("save/load:")


# ---- automatic examples ------------------------------------------------------------------------

def test_automatic_examples_guess_an_input_from_the_first_layer(project: Project) -> None:
    """No example tables: classes built with their defaults get an input made for their first
    layer; a guess that cannot run is unverified, never rejected."""
    project.pyproject({})
    project.write("conv.py", model_source(
        init_lines=["self.conv = nn.Conv2d(3, 8, 3)"], forward_lines=["x = self.conv(x)"]))
    project.write("seq.py", model_source(
        init_lines=["self.embed = nn.Embedding(50, 8)",
                    "self.rnn = nn.GRU(8, 8, batch_first=True)"],
        forward_lines=["x, _ = self.rnn(self.embed(x))"]))
    project.write("needs_args.py", model_source(
        init_lines=["self.fc = nn.Linear(width, 4)"], forward_lines=["x = self.fc(x)"]
    ).replace("def __init__(self, ", "def __init__(self, width, "))
    # The first layer takes 4 features, forward first cuts the input to 2 of them.
    project.write("wrong_guess.py", model_source(
        init_lines=["self.fc = nn.Linear(4, 4)"], forward_lines=["x = self.fc(x[:, :2])"]))

    result = project.run()

    conv = verdict_of(result, "conv.py")
    assert conv.verdict == "verified", conv.reason
    assert conv.reason.startswith("guessed input randn(2, 3, 32, 32) for Conv2d; ")
    seq = verdict_of(result, "seq.py")
    assert seq.verdict == "verified", seq.reason
    assert seq.reason.startswith("guessed input randint(0, 50, (2, 16)) for Embedding; ")
    needs_args = verdict_of(result, "needs_args.py")
    assert needs_args.verdict == "unverified"
    assert needs_args.reason.startswith("could not infer inputs: the constructor needs "
                                        "arguments")
    assert 'add [tool.tsfix.examples."needs_args.py:Net"]' in needs_args.reason
    wrong = verdict_of(result, "wrong_guess.py")
    assert wrong.verdict == "unverified"
    assert wrong.reason.startswith("could not infer inputs: the guessed input (randn(2, 4) "
                                   "for Linear) fails in the original: RuntimeError")


def test_automatic_examples_can_be_turned_off(project: Project) -> None:
    project.pyproject({}, settings="auto-examples = false")
    project.write("conv.py", model_source(
        init_lines=["self.conv = nn.Conv2d(3, 8, 3)"], forward_lines=["x = self.conv(x)"]))
    c = verdict_of(project.run(), "conv.py")
    assert c.verdict == "unverified" and c.reason.startswith("no example inputs: add")


def test_weights_load_into_a_scripted_module_that_lists_its_non_persistent_buffers() -> None:
    """torch 2.13 keeps no persistent flag once scripted: the scripted module's state_dict
    lists a non-persistent buffer (foreign-class makes a foreign module's buffers so) that the
    eager original's weights lack. Only such a buffer may be missing; any other key still
    fails."""
    torch = pytest.importorskip("torch")
    from tsfix.codemods.validation.verifier import load_weights

    class WithBuffer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)
            self.register_buffer("kernel", torch.ones(2), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * self.kernel

    eager = WithBuffer()
    scripted = torch.jit.script(WithBuffer())
    assert "kernel" in scripted.state_dict() and "kernel" not in eager.state_dict()
    load_weights(scripted, eager.state_dict())
    assert torch.equal(scripted.fc.weight, eager.fc.weight)
    weights = {k: v for k, v in eager.state_dict().items() if k != "fc.bias"}
    with pytest.raises(RuntimeError, match=r"fc\.bias"):
        load_weights(scripted, weights)


def test_a_reached_class_with_a_non_persistent_buffer_is_verified(tmp_path: Path) -> None:
    """The class a configured model reaches keeps a buffer out of its state_dict
    (persistent=False; foreign-class makes a foreign module's buffers so): its scripted
    artifact, given another instance's weights, is not short of that key."""
    from tsfix import Options, run

    (tmp_path / "model.py").write_text(textwrap.dedent("""\
        import torch
        from torch import nn


        class Blur(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("kernel", torch.ones(4) / 4, persistent=False)

            def forward(self, x):
                return (x * self.kernel).float() + x.bool().float()


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.blurs = nn.ModuleList([Blur(), Blur()])
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                for blur in self.blurs:
                    x = blur(x)
                return self.fc(x)
        """))
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tsfix.examples."model.py:Net"]\ninputs = ["randn(2, 4)"]\n')
    result = run([str(tmp_path / "model.py")], Options(rules=["dtype-methods"], mode="diff"))
    blur = next(c for c in result.classes() if c.class_name == "Blur")
    assert blur.verdict == "verified", blur.reason
    assert "one artifact served 2 of 2" in blur.reason


def test_a_scripted_call_that_raises_is_said_with_its_cause() -> None:
    """hourglass-transformer: an unannotated `context=None` scripted as a Tensor; the scripted
    call raised and the verdict said only "The following operation failed in the TorchScript
    interpreter.", which blamed the rule whose rewrite was being checked. Measured message."""
    from tsfix.codemods.validation.worker import short_error

    raised = RuntimeError(
        "The following operation failed in the TorchScript interpreter.\n"
        "Traceback of TorchScript (most recent call last):\n"
        '  File "/tmp/ctxt.py", line 6, in forward\n'
        "    def forward(self, x, context=None):\n"
        "        kv = context if context is not None else x\n"
        "        return kv * 2\n"
        "               ~~~~~~ <--- HERE\n"
        "RuntimeError: Expected a proper Tensor but got None (or an undefined Tensor in C++) "
        "for argument #0 'self'\n")
    assert short_error(raised) == (
        "RuntimeError: The following operation failed in the TorchScript interpreter. "
        "RuntimeError: Expected a proper Tensor but got None (or an undefined Tensor in C++) "
        "for argument #0 'self' (at ctxt.py line 6)")
