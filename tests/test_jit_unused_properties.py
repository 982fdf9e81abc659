"""jit-unused-properties: which properties are listed (each construct TorchScript cannot
compile, measured below), where the list goes (new, extended, copied from a base of the file, a
subclass's own list), and what is refused: a property a compiled method reads, lists that are
not literals, bases from other files. The fixture pairs are tests/test_fixtures.py's."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, rule_rewriter
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.jit_unused_properties import JitUnusedProperties

FIXTURES = FIXTURES_ROOT / "jit-unused-properties"
COMMENT = ("    # TorchScript compiles every property; it cannot compile these, and no compiled\n"
           "    # method reads them.\n")


rewrite = rule_rewriter(JitUnusedProperties)


# Property bodies TorchScript cannot compile (torch 2.13), one per construct the rule knows.
FAILING = {
    "mangled": "return self.__rate",
    "dunder": "return self.__class__.__name__",
    "type_self": "return type(self).__name__",
    "next": "return next(iter([1]))",
    "generator_method": "return len(list(self.parameters()))",
    "numpy": "return np.sqrt(self.n)",
    "numpy_method": "return self.table.numpy()",
    "lambda": "f = lambda: 1\n        return f()",
    "try": "try:\n            return 1\n        except Exception:\n            return 2",
    "format_spec": 'return f"{self.n:03d}"',
    "nested_def": "def g():\n            return 1\n        return g()",
    "set_literal": "return len({1, 2})",
    "walrus": "return (k := self.n)",
}
COMPILING = {
    "plain": "return self.n * 2",
    "container_length": "return len(self.blocks)",
    "weight_shape": "return self.proj.weight.shape[0]",
    "generator_expression": "return sum(i for i in range(self.n))",
}


def model(body: str, forward: str = "return x") -> str:
    """A module whose ``value`` property's getter is ``body`` (at the method body's indentation,
    8 spaces)."""
    return ("import numpy as np\n"
            "import torch\n"
            "import torch.nn as nn\n"
            "class M(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.n = 3\n"
            "        self.__rate = 8000.0\n"
            "        self.table = torch.zeros(2)\n"
            "        self.proj = nn.Linear(2, 2)\n"
            "        self.blocks = nn.ModuleList([nn.Linear(2, 2)])\n"
            "    @property\n"
            "    def value(self):\n"
            f"        {body}\n"
            "    def forward(self, x):\n"
            f"        {forward}\n")


@pytest.mark.parametrize("case", list(FAILING))
def test_each_construct_that_does_not_compile_is_listed(case: str) -> None:
    result = rewrite_source(model(FAILING[case]), RewriteSettings([JitUnusedProperties]), "m.py")
    assert f'{COMMENT}    __jit_unused_properties__ = ["value"]\n\n    def __init__' in result.text
    [fix] = result.fixes
    assert (fix.code, fix.class_name, fix.line) == ("TSF225", "M", 13)
    assert fix.message.startswith("property value does not compile: it ")


@pytest.mark.parametrize("case", list(COMPILING))
def test_properties_that_compile_are_left_alone(case: str) -> None:
    source = model(COMPILING[case])
    result = rewrite_source(source, RewriteSettings([JitUnusedProperties]), "m.py")
    assert (result.text, result.changes, result.skips) == (source, [], [])


@pytest.mark.slow
@pytest.mark.parametrize("case", [*FAILING, *COMPILING])
def test_the_constructs_are_measured(tmp_path: Path, case: str) -> None:
    """The original fails to script exactly for the listed constructs; the rewrite scripts."""
    torch = pytest.importorskip("torch")
    source = model({**FAILING, **COMPILING}[case])
    rewritten = rewrite_source(source, RewriteSettings([JitUnusedProperties]), "m.py").text
    outcomes = []
    for index, text in enumerate((source, rewritten)):
        path = tmp_path / f"case_{case}_{index}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = loaded
        spec.loader.exec_module(loaded)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch.jit.script(loaded.M())
            except Exception as exc:  # TorchScript raises several kinds
                outcomes.append(str(exc).splitlines()[0])
            else:
                outcomes.append(None)
    assert (outcomes[0] is not None) == (case in FAILING), outcomes
    assert outcomes[1] is None, outcomes


def test_a_property_a_compiled_method_reads_is_refused_with_the_reader() -> None:
    source = model(FAILING["mangled"], forward="return x * self.value")
    result = rewrite_source(source, RewriteSettings([JitUnusedProperties]), "m.py")
    assert result.text == source and not result.changes
    [skip] = result.skips
    assert skip.code == "TSF225" and skip.line == 13
    assert "M.forward() reads it: TorchScript must compile it" in skip.reason


def test_readers_anywhere_in_the_file_count() -> None:
    """A subclass's forward, or another module reading `.sample_rate` of its submodule."""
    source = textwrap.dedent("""\
        import torch.nn as nn
        class Base(nn.Module):
            def __init__(self):
                super().__init__()
                self.__sample_rate = 8000
            @property
            def sample_rate(self):
                return self.__sample_rate
        class Child(Base):
            def forward(self, x):
                return x
        class Wrapper(nn.Module):
            def __init__(self):
                super().__init__()
                self.inner = Child()
            def forward(self, x):
                return self.helper(x)
            def helper(self, x):
                return x * getattr(self.inner, "sample_rate")
        """)
    result = rewrite_source(source, RewriteSettings([JitUnusedProperties]), "m.py")
    assert result.text == source
    assert [(s.class_name, s.code) for s in result.skips] == [("Base", "TSF225")]
    assert "Wrapper.helper() reads it" in result.skips[0].reason


def test_existing_lists_are_extended_and_subclass_lists_get_inherited_names() -> None:
    result = rewrite("""\
        import torch.nn as nn
        class Base(nn.Module):
            __jit_unused_properties__ = ("name",)
            @property
            def name(self):
                return "base"
            @property
            def device(self):
                return next(self.parameters()).device
        class Child(Base):
            __jit_unused_properties__ = ["extra",]
            @property
            def extra(self):
                return 1
            def forward(self, x):
                return x
        """)
    assert '    __jit_unused_properties__ = ("name", "device")\n' in result.text
    assert '    __jit_unused_properties__ = ["extra", "device"]\n' in result.text
    assert [c.class_name for c in result.changes] == ["Base", "Child"]
    # The site is the property's own class; the subclass's list is bookkeeping.
    assert [(f.class_name, f.line) for f in result.fixes] == [("Base", 8)]


def test_a_new_list_keeps_the_entries_a_base_of_the_file_lists() -> None:
    result = rewrite("""\
        import torch.nn as nn
        class Base(nn.Module):
            __jit_unused_properties__ = ["name"]
            @property
            def name(self):
                return type(self).__name__
        class Child(Base):
            # the model
            @property
            def device(self):
                return next(self.parameters()).device
            def forward(self, x):
                return x
        """)
    assert result.text.endswith(textwrap.dedent("""\
        class Child(Base):
            # the model
            # TorchScript compiles every property; it cannot compile these, and no compiled
            # method reads them.
            __jit_unused_properties__ = ["name", "device"]

            @property
            def device(self):
                return next(self.parameters()).device
            def forward(self, x):
                return x
        """))


@pytest.mark.parametrize(("header", "bases", "listed", "reason"), [
    ("from .base import Base", "Base", "", "its base Base is defined in another file"),
    ("", "nn.Module", "    __jit_unused_properties__ = NAMES\n",
     "__jit_unused_properties__ is not a list or tuple literal"),
    ("", "nn.Module", "    __jit_unused_properties__: list = []\n",
     "set more than once or not by a plain assignment"),
])
def test_lists_the_rule_cannot_write_safely_are_refused(header: str, bases: str, listed: str,
                                                        reason: str) -> None:
    source = (f"import torch.nn as nn\n{header}\nNAMES = ['a']\n"
              f"class M({bases}):\n{listed}"
              "    @property\n"
              "    def device(self):\n"
              "        return next(self.parameters()).device\n"
              "    def forward(self, x):\n"
              "        return x\n")
    result = rewrite_source(source, RewriteSettings([JitUnusedProperties]), "m.py")
    assert result.text == source and not result.changes
    [skip] = result.skips
    assert reason in skip.reason and skip.code == "TSF225"


def test_setter_that_does_not_compile_is_enough_and_deleter_does_not_count() -> None:
    result = rewrite("""\
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self._rate = 8000.0
            @property
            def rate(self):
                return self._rate
            @rate.setter
            def rate(self, value: float):
                self.__rate = value
            @property
            def other(self):
                return self._rate
            @other.deleter
            def other(self):
                del self.__dict__["_rate"]
            def forward(self, x):
                return x
        """)
    assert '__jit_unused_properties__ = ["rate"]' in result.text
    assert "name-mangled attribute `self.__rate`" in result.changes[0].summary


def test_fixture_refusal() -> None:
    path = FIXTURES / "device_property.in.py"
    result = rewrite_source(path.read_text(), RewriteSettings([JitUnusedProperties]), path.name)
    assert [(s.class_name, s.code) for s in result.skips] == [("Scaled", "TSF225")]
    assert [c.class_name for c in result.changes] == ["Classifier"]
