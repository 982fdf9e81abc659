"""lift-branch decisions beyond the embedded examples: what it lifts (whole outputs), what it
refuses and why, which methods it reads (compiled ones only), and the sites it reports."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from conftest import rewrite_to_fixed_point, rule_rewriter
from tsfix.codemods.facts.project import lookup
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.pipeline.settings import FileContext, RewriteSettings
from tsfix.codemods.rules.lift_branch import LiftBranch

BLOCKERS = Path(__file__).resolve().parent.parent / "fixtures" / "check" / "blockers.py"


rewrite = rule_rewriter(LiftBranch)


def reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


def refusals(result: Rewrite) -> list[tuple[str | None, int, str]]:
    """(code, line, reason) of every site left alone."""
    return [(s.code, s.line, s.reason) for s in result.skips]


def fixes(result: Rewrite) -> list[tuple[str, int, str]]:
    return [(f.code, f.line, f.message) for f in result.fixes]


def branch(attr: str) -> str:
    return (f"branch on configuration attribute 'self.{attr}' (an exported model keeps only the "
            "branch chosen at construction)")


# ---- what a lift looks like ---------------------------------------------------------------------

def test_new_parameter_never_collides_with_a_local() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, flag: bool = True):
                super().__init__()
                self.flag = flag
            def forward(self, x):
                flag = x.sum() > 0
                if self.flag and flag:
                    x = x + 1
                return x
        """)
    assert result.text == textwrap.dedent("""
        from typing import Optional

        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, flag: bool = True):
                super().__init__()
                self.flag = flag
            def forward(self, x, flag_value: Optional[bool] = None):
                if flag_value is None:
                    flag_value = self.flag
                flag = x.sum() > 0
                if flag_value and flag:
                    x = x + 1
                return x
        """)
    assert result.changes[0].lifted == {"flag_value": "flag"}
    assert fixes(result) == [("TSF204", 9, branch("flag"))]


def test_parameter_goes_after_star_args_so_positional_calls_bind_as_before() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.mode = "a"
            def forward(self, x, *rest):
                return x if self.mode == "a" else -x
        """)
    assert result.text == textwrap.dedent("""
        from typing import Optional

        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.mode = "a"
            def forward(self, x, *rest, mode: Optional[str] = None):
                if mode is None:
                    mode = self.mode
                return x if mode == "a" else -x
        """)


def test_declared_dataclass_field_type_wins_over_usage() -> None:
    result = rewrite("""
        from dataclasses import dataclass
        import torch.nn as nn
        @dataclass
        class Cfg:
            act: str = "gelu"
        class M(nn.Module):
            def __init__(self, cfg: Cfg):
                super().__init__()
                self.cfg = cfg
            def forward(self, x):
                if self.cfg.act:
                    x = x.relu()
                return x
        """)
    assert result.text == textwrap.dedent("""
        from dataclasses import dataclass
        from typing import Optional
        import torch.nn as nn
        @dataclass
        class Cfg:
            act: str = "gelu"
        class M(nn.Module):
            def __init__(self, cfg: Cfg):
                super().__init__()
                self.cfg = cfg
                self.act = self.cfg.act

            def forward(self, x, act: Optional[str] = None):
                if act is None:
                    act = self.act
                if act:
                    x = x.relu()
                return x
        """)
    # The read is a config object's field (TSF203) and a branch on it (TSF204): both fixed.
    assert sorted(f[:2] for f in fixes(result)) == [("TSF203", 12), ("TSF204", 12)]


def test_usage_gives_the_type_when_the_source_is_unknown() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, threshold):
                super().__init__()
                self.threshold = threshold
            def forward(self, x):
                if self.threshold > 0.5:
                    x = x.clamp(max=1.0)
                return x
        """)
    assert result.text == textwrap.dedent("""
        from typing import Optional

        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, threshold):
                super().__init__()
                self.threshold = threshold
            def forward(self, x, threshold: Optional[float] = None):
                if threshold is None:
                    threshold = self.threshold
                if threshold > 0.5:
                    x = x.clamp(max=1.0)
                return x
        """)


def test_one_line_forward_body_gets_a_block() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.neg = False
            def forward(self, x): return -x if self.neg else x
        """)
    assert result.text == textwrap.dedent("""
        from typing import Optional

        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.neg = False
            def forward(self, x, neg: Optional[bool] = None):
                if neg is None:
                    neg = self.neg
                return -x if neg else x
        """)


def test_existing_typing_import_is_extended_not_duplicated() -> None:
    result = rewrite("""
        from typing import List
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.flag = True
            def forward(self, x):
                return x if self.flag else -x
        """)
    assert result.text == textwrap.dedent("""
        from typing import List, Optional
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.flag = True
            def forward(self, x, flag: Optional[bool] = None):
                if flag is None:
                    flag = self.flag
                return x if flag else -x
        """)


def test_typing_import_joins_the_standard_library_group() -> None:
    result = rewrite("""
        import math

        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.flag = True
            def forward(self, x):
                return x if self.flag else -x
        """)
    assert result.text == textwrap.dedent("""
        import math
        from typing import Optional

        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.flag = True
            def forward(self, x, flag: Optional[bool] = None):
                if flag is None:
                    flag = self.flag
                return x if flag else -x
        """)


def test_formatting_never_touches_lines_the_rule_left_alone() -> None:
    code = "\n\nimport torch.nn as nn\nx = [1,\n  2]\nclass M(nn.Module):\n" \
           "    def __init__(self):\n        super().__init__()\n        self.flag = True\n" \
           "    def forward(self, x):\n        return x if self.flag else -x\n"
    result = rewrite_source(code, RewriteSettings([LiftBranch]), "m.py")
    assert result.text == (
        "\n\nfrom typing import Optional\n\nimport torch.nn as nn\nx = [1,\n  2]\n"
        "class M(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.flag = True\n    def forward(self, x, flag: Optional[bool] = None):\n"
        "        if flag is None:\n            flag = self.flag\n"
        "        return x if flag else -x\n")


_FLAG_CLASS = """import torch.nn as nn


class M(nn.Module):
    def __init__(self, flag: bool = True):
        super().__init__()
        self.flag = flag

"""
_FLAG_BODY = """
        if self.flag:
            x = x + shift
        return x
"""
_LIFTED_BODY = """
        if flag is None:
            flag = self.flag
        if flag:
            x = x + shift
        return x
"""


def _lifted(signature: str) -> str:
    """The whole output for a forward() with ``signature`` (the def lines) rewritten."""
    return f"from typing import Optional\n\n{_FLAG_CLASS}{signature}{_LIFTED_BODY}"


def test_multi_line_signature_without_trailing_comma_keeps_its_layout() -> None:
    """Issue 15 item 5: the new parameter once landed at the def's indentation after a
    trailing space (``shift = 0., ``)."""
    result = rewrite_source(
        _FLAG_CLASS + "    def forward(\n        self,\n        x,\n"
        "        shift = 0.\n    ):" + _FLAG_BODY,
        RewriteSettings([LiftBranch]),
        "m.py",
    )
    assert result.text == _lifted(
        "    def forward(\n        self,\n        x,\n        shift = 0.,\n"
        "        flag: Optional[bool] = None\n    ):")


def test_multi_line_signature_keeps_its_trailing_comma_and_comments() -> None:
    result = rewrite_source(
        _FLAG_CLASS + "    def forward(\n        self,  # the module\n"
        "        x,\n        shift = 0.,  # added to x\n    ):" + _FLAG_BODY,
        RewriteSettings([LiftBranch]),
        "m.py",
    )
    assert result.text == _lifted(
        "    def forward(\n        self,  # the module\n        x,\n"
        "        shift = 0.,  # added to x\n        flag: Optional[bool] = None,\n    ):")


def test_closing_parenthesis_on_its_own_line_after_a_one_line_parameter_list() -> None:
    result = rewrite_source(_FLAG_CLASS + "    def forward(\n        self, x, shift = 0.\n"
                            "    ):" + _FLAG_BODY, RewriteSettings([LiftBranch]), "m.py")
    assert result.text == _lifted(
        "    def forward(\n        self, x, shift = 0., flag: Optional[bool] = None\n    ):")


def test_skip_classes_leaves_a_rejected_class_alone() -> None:
    code = textwrap.dedent("""
        import torch.nn as nn
        class A(nn.Module):
            def __init__(self):
                super().__init__()
                self.flag = True
            def forward(self, x):
                return x if self.flag else -x
        class B(A):
            def forward(self, x):
                return x * 2 if self.flag else x
        """)
    result = rewrite_source(
        code,
        RewriteSettings([LiftBranch]),
        FileContext("m.py", skip_classes={"lift-branch": frozenset({"A"})}),
    )
    assert result.changes == []    # B does not assign flag itself
    assert result.text == code


def test_non_module_classes_are_ignored() -> None:
    code = """
        class Config:
            def __init__(self):
                self.flag = True
            def forward(self, x):
                return x if self.flag else -x
        """
    result = rewrite(code)
    assert result.text == textwrap.dedent(code) and result.skips == [] and result.fixes == []


# ---- refused, with the reason and (for settings) the code ---------------------------------------

def test_structural_flag_through_a_constructor_argument_is_not_lifted() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, use_bias=True):
                super().__init__()
                self.use_bias = use_bias
                self.fc = nn.Linear(4, 4, bias=use_bias)
            def forward(self, x):
                if self.use_bias:
                    x = x * 2
                return self.fc(x)
        """)
    assert not result.changed
    assert refusals(result) == [("TSF204", 9, "self.use_bias decides which submodules __init__ "
                                 "builds (line 7); both branches must compile")]
    assert result.skips[0].message == branch("use_bias")


def test_structural_layer_count_is_not_lifted() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, depth=2):
                super().__init__()
                self.depth = depth
                self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(depth)])
            def forward(self, x):
                if self.depth > 1:
                    x = x * 2
                return x
        """)
    assert not result.changed
    assert refusals(result) == [("TSF204", 9, "self.depth decides which submodules __init__ "
                                 "builds (line 7); both branches must compile")]


def test_inherited_attribute_is_reported_not_guessed() -> None:
    result = rewrite("""
        from base import Base
        class M(Base):
            def forward(self, x):
                if self.use_x:
                    x = x + 1
                return x
        """)
    assert not result.changed
    # Not shown to be a setting: a note for -v, not a check finding.
    assert refusals(result) == [(None, 5, "self.use_x is not assigned in M.__init__")]


def test_optional_values_and_none_comparisons_are_not_lifted() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, temperature=None, mode="a"):
                super().__init__()
                self.temperature = temperature
                self.mode = mode
            def forward(self, x):
                if self.temperature:
                    x = x / 2
                if self.mode is not None:
                    x = x + 1
                return x
        """)
    assert not result.changed
    assert refusals(result) == [
        ("TSF204", 9, "self.temperature comes from temperature, which may be None"),
        ("TSF204", 11, "self.mode is compared with None: an optional setting, which a lifted "
                       "argument (None: not given) cannot pass")]


def test_state_training_and_submodules_are_not_settings() -> None:
    result = rewrite("""
        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.warm = True
                self.proj = nn.Linear(4, 4)
                self.act = torch.relu
            def forward(self, x):
                if self.warm:
                    self.warm = False
                if self.training and self.proj is not None:
                    x = self.act(self.proj(x))
                return x
        """)
    assert not result.changed
    assert refusals(result) == [
        ("TSF204", 11, "self.warm is also assigned in forward() (state, not configuration)"),
        (None, 13, "self.training is set by train()/eval(), not configuration"),
        (None, 13, "self.proj is a submodule")]


def test_an_attribute_declared_as_a_module_is_not_a_setting() -> None:
    result = rewrite("""
        from typing import Optional
        import torch.nn as nn
        class M(nn.Module):
            skip: Optional[nn.Module]
            def __init__(self):
                super().__init__()
                self.proj: Optional[nn.Module] = None
                self.skip = None
            def forward(self, x):
                if self.proj is not None or self.skip is not None:
                    x = x + 1
                return x
        """)
    assert not result.changed
    assert refusals(result) == [
        (None, 11, "self.proj is declared Optional[nn.Module], not configuration"),
        (None, 11, "self.skip is declared Optional[nn.Module], not configuration")]


def test_every_read_of_a_refused_setting_is_a_site() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, mode=None):
                super().__init__()
                self.mode = mode
            def forward(self, x):
                if self.mode == "a":
                    x = x + 1
                elif self.mode == "b":
                    x = x - 1
                return x
        """)
    assert [(code, line) for code, line, _ in refusals(result)] == [("TSF204", 8),
                                                                  ("TSF204", 10)]


# ---- flags passed to a class of another file (issue 15 item 1) ----------------------------------

CROSSFILE = Path(__file__).resolve().parent.parent / "fixtures" / "lift-branch" / "crossfile"
PASSED = ("in __init__ (line {line}): the submodule keeps the value it was built with, which a "
          "lifted argument would not change")


def rewrite_file(path: Path) -> Rewrite:
    """lift-branch on a file that exists, so that its imports can be followed."""
    return rewrite_to_fixed_point(path.read_text(), [LiftBranch], path=str(path))


def write_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))


def test_flag_passed_to_a_module_class_of_another_file_is_not_lifted() -> None:
    """``from pkg.inner import Attention; self.attn = Attention(dim, causal=causal)``: lifting
    ``causal`` would change CausalBlock's own branch while the attention keeps the mask it was
    built with. The flag read only in forward() (ResidualBlock) is still lifted."""
    outer = CROSSFILE / "pkg" / "outer.in.py"
    result = rewrite_file(outer)
    assert result.text == (CROSSFILE / "pkg" / "outer.out.py").read_text()
    assert [(s.class_name, s.code, s.line, s.reason) for s in result.skips] == [
        ("CausalBlock", "TSF204", 22, "self.causal is passed to Attention (a module class "
         "defined in pkg/inner.py) " + PASSED.format(line=19))]
    assert result.changes[0].class_name == "ResidualBlock"
    assert result.changes[0].lifted == {"residual": "residual"}


OUTER = """
    import torch.nn as nn
    {imports}

    class Outer(nn.Module):
        def __init__(self, causal: bool = False):
            super().__init__()
            self.causal = causal
            self.inner = {call}

        def forward(self, x):
            if self.causal:
                x = x.flip(0)
            return x
    """
MODULE_CLASS = """
    import torch.nn as nn

    class Inner(nn.Module):
        def __init__(self, causal=False):
            super().__init__()
            self.causal = causal
    """


def outer_refusal(tmp_path: Path, imports: str, call: str = "Inner(causal=causal)",
                  files: dict[str, str] | None = None, outer: str = "pkg/outer.py") -> list[str]:
    write_tree(tmp_path, {**(files or {}),
                          outer: OUTER.format(imports=imports, call=call)})
    result = rewrite_file(tmp_path / outer)
    return [s.reason for s in result.skips] if not result.changed else ["lifted"]


def test_relative_imports_and_re_exports_are_followed(tmp_path: Path) -> None:
    package = {"pkg/__init__.py": "from .layers import Inner\n",
               "pkg/layers/__init__.py": "from .inner import *\n",
               "pkg/layers/inner.py": MODULE_CLASS}
    passed = "self.causal is passed to {} (a module class defined in pkg/layers/inner.py) "
    assert outer_refusal(tmp_path, "from .layers.inner import Inner", files=package) == [
        passed.format("Inner") + PASSED.format(line=9)]
    # Through the package's re-exports (an import, then a * import).
    assert outer_refusal(tmp_path, "from pkg import Inner", files=package) == [
        passed.format("Inner") + PASSED.format(line=9)]
    assert outer_refusal(tmp_path, "from . import layers", "layers.Inner(causal)",
                         files=package) == [passed.format("layers.Inner") + PASSED.format(line=9)]
    # A * import of the tree's module; a name no module of the tree defines is not followed.
    assert outer_refusal(tmp_path, "from .layers.inner import *", files=package) == [
        passed.format("Inner") + PASSED.format(line=9)]
    assert outer_refusal(tmp_path, "from .layers.inner import *", "Other(causal)",
                         files=package) == ["lifted"]
    # Two levels up, from a subpackage.
    subpackage = {**package, "pkg/sub/__init__.py": ""}
    assert outer_refusal(tmp_path, "from ..layers.inner import Inner", files=subpackage,
                         outer="pkg/sub/outer.py") == [
        passed.format("Inner") + PASSED.format(line=9)]


def test_a_module_class_of_a_sibling_script_is_followed(tmp_path: Path) -> None:
    """No package: a script imports its neighbour (the script's folder is on sys.path)."""
    assert outer_refusal(tmp_path, "from inner import Inner",
                         files={"inner.py": MODULE_CLASS}, outer="outer.py") == [
        "self.causal is passed to Inner (a module class defined in inner.py) "
        + PASSED.format(line=9)]


def test_flag_passed_to_what_is_shown_not_to_be_a_module_is_still_lifted(
        tmp_path: Path) -> None:
    files = {"pkg/__init__.py": "",
             "pkg/config.py": """
                 from dataclasses import dataclass

                 @dataclass
                 class Settings:
                     causal: bool = False

                 def describe(causal):
                     return "causal" if causal else "full"
                 """}
    assert outer_refusal(tmp_path, "from pkg.config import Settings",
                         "Settings(causal=causal)", files) == ["lifted"]
    assert outer_refusal(tmp_path, "from .config import describe", "describe(causal)",
                         files) == ["lifted"]
    # The standard library and torch outside torch.nn build no submodule either.
    assert outer_refusal(tmp_path, "from collections import OrderedDict",
                         "OrderedDict(causal=causal)", files) == ["lifted"]
    assert outer_refusal(tmp_path, "import torch", "torch.tensor(causal)", files) == ["lifted"]


def test_a_class_that_cannot_be_read_is_taken_to_build_a_module(tmp_path: Path) -> None:
    """Conservative: an installed package's class, a class of the tree with a base from one,
    or a relative import whose file is missing may each build a submodule from the flag."""
    files = {"pkg/__init__.py": "",
             "pkg/inner.py": """
                 from lightning import LightningModule

                 class Inner(LightningModule):
                     pass
                 """}
    assert outer_refusal(tmp_path, "from x_transformers import Attention",
                         "Attention(causal=causal)", files) == [
        "self.causal is passed to Attention (x_transformers.Attention, whose source is not in "
        "this tree: a class from it is taken to be a module) " + PASSED.format(line=9)]
    assert outer_refusal(tmp_path, "from pkg.inner import Inner", files=files) == [
        "self.causal is passed to Inner (a class defined in pkg/inner.py with a base not in "
        "this tree: taken to be a module) " + PASSED.format(line=9)]
    assert outer_refusal(tmp_path, "from .missing import Inner", files=files) == [
        "self.causal is passed to Inner (from .missing.Inner, whose source was not found) "
        + PASSED.format(line=9)]
    # A function of an installed package is not followed, as in the user's tree.
    assert outer_refusal(tmp_path, "from einops import repeat", "repeat(causal)",
                         files) == ["lifted"]
    (tmp_path / "pkg" / "broken.py").write_text("class Inner(nn.Module:\n")
    assert outer_refusal(tmp_path, "from pkg.broken import Inner", files=files) == [
        "self.causal is passed to Inner (from pkg/broken.py, which cannot be parsed: taken to "
        "be a module) " + PASSED.format(line=9)]


def test_lookup_answers_what_an_imported_name_is(tmp_path: Path) -> None:
    write_tree(tmp_path, {
        "pkg/__init__.py": "from torch.nn import Linear\nfrom .blocks import Block, make\n",
        "pkg/blocks.py": """
            import enum
            from torch import nn

            class Base(nn.Module):
                pass

            class Block(Base):
                pass

            class Mode(enum.Enum):
                A = 1

            def make():
                return Block()
            """,
        "pkg/user.py": ""})
    user = tmp_path / "pkg" / "user.py"
    block = lookup(user, "pkg.Block")
    assert block is not None
    assert (block.kind, block.module, block.display, block.line) == ("class", True,
                                                                     "pkg/blocks.py", 8)
    mode = lookup(user, "blocks.Mode", level=1)
    assert mode is not None and (mode.kind, mode.module) == ("class", False)
    make = lookup(user, "pkg.make")
    assert make is not None and make.kind == "function"
    linear = lookup(user, "pkg.Linear")
    assert linear is not None and (linear.kind, linear.external) == ("external",
                                                                     "torch.nn.Linear")
    assert lookup(user, "torch.nn.Linear") is None
    assert lookup(user, "pkg.blocks.Block.Inner") is None
    # An edited file is read again (the cache is keyed by modification time and size).
    (tmp_path / "pkg" / "blocks.py").write_text("class Block:\n    pass\n")
    block = lookup(user, "pkg.Block")
    assert block is not None and (block.module, block.line) == (False, 1)


# ---- config objects (TSF203) --------------------------------------------------------------------

def test_config_object_reads_are_each_fixed_or_refused() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.cfg = cfg
            def forward(self, x):
                x = x * self.cfg.scale + self.cfg.scale
                return self.cfg.act(x)
        """)
    assert result.text == textwrap.dedent("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.cfg = cfg
                self.scale = self.cfg.scale
            def forward(self, x):
                x = x * self.scale + self.scale
                return self.cfg.act(x)
        """)
    message = "reads a field of config object 'self.cfg'"
    assert fixes(result) == [("TSF203", 8, f"self.cfg.scale {message}"),
                             ("TSF203", 8, f"self.cfg.scale {message}")]
    assert refusals(result) == [("TSF203", 9, "self.cfg.act(...) calls a method of the config "
                                 "object; only fields read as values are copied")]


def test_config_object_assigned_in_a_block_is_refused_at_each_read() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, cfg=None):
                super().__init__()
                if cfg is not None:
                    self.cfg = cfg
            def forward(self, x):
                if self.cfg.residual:
                    x = x + 1
                return x
        """)
    assert not result.changed
    why = "self.cfg is assigned inside a block of __init__; its fields are not copied"
    assert sorted(refusals(result)) == [("TSF203", 9, why), ("TSF204", 9, why)]


# ---- only what TorchScript compiles -------------------------------------------------------------

def test_a_flag_only_an_ignored_helper_reads_is_not_lifted() -> None:
    """Issue 14: forward() once got a use_act argument for a flag only an ignored helper read."""
    code = textwrap.dedent("""
        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, use_act=True):
                super().__init__()
                self.use_act = use_act
            def forward(self, x):
                return self._debug(x)
            @torch.jit.ignore
            def _debug(self, x):
                if self.use_act:
                    x = x.relu()
                return x
        """)
    result = rewrite(code)
    assert result.text == code
    assert result.skips == [] and result.fixes == []


def test_a_flag_an_ignored_helper_also_reads_is_refused() -> None:
    """The ignored helper runs in Python and would read the attribute, not the argument: one
    artifact would then mix two values of the setting."""
    result = rewrite("""
        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, use_act=True):
                super().__init__()
                self.use_act = use_act
            def forward(self, x):
                if self.use_act:
                    x = x.relu()
                return self._debug(x)
            @torch.jit.ignore
            def _debug(self, x):
                return x * 2 if self.use_act else x
        """)
    assert not result.changed
    assert refusals(result) == [("TSF204", 9, "self.use_act is also read in _debug(), which "
                                 "runs in Python (a @torch.jit.ignore method or one it calls): "
                                 "it would not see the lifted argument")]


def test_a_branch_that_never_compiles_is_left_alone() -> None:
    code = textwrap.dedent("""
        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, verbose=False):
                super().__init__()
                self.verbose = verbose
            def forward(self, x):
                if not torch.jit.is_scripting():
                    if self.verbose:
                        print(x.shape)
                return x
        """)
    result = rewrite(code)
    assert result.text == code and result.skips == [] and result.fixes == []


def test_export_method_gets_its_own_lifted_parameter() -> None:
    """``@torch.jit.export`` methods are compiled like forward(): a setting they read is lifted
    into their own signature (forward() is left as it is when it does not need it)."""
    result = rewrite("""
        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, scale_up=True):
                super().__init__()
                self.scale_up = scale_up
            def forward(self, x):
                return x
            @torch.jit.export
            def infer(self, x):
                return x * 2 if self.scale_up else x
        """)
    assert result.text == textwrap.dedent("""
        from typing import Optional

        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, scale_up=True):
                super().__init__()
                self.scale_up = scale_up
            def forward(self, x):
                return x
            @torch.jit.export
            def infer(self, x, scale_up: Optional[bool] = None):
                if scale_up is None:
                    scale_up = self.scale_up
                return x * 2 if scale_up else x
        """)
    # forward() takes no new parameter, so validation has none to call it with.
    assert result.changes[0].lifted == {}
    assert fixes(result) == [("TSF204", 12, branch("scale_up"))]


def test_export_method_and_forward_share_a_helper() -> None:
    result = rewrite("""
        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, use_act=True):
                super().__init__()
                self.use_act = use_act
            def forward(self, x):
                return self._act(x) + 1
            @torch.jit.export
            def features(self, x):
                return self._act(x)
            def _act(self, x):
                return x.relu() if self.use_act else x
        """)
    assert result.text == textwrap.dedent("""
        from typing import Optional

        import torch
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, use_act=True):
                super().__init__()
                self.use_act = use_act

            def forward(self, x, use_act: Optional[bool] = None):
                if use_act is None:
                    use_act = self.use_act
                return self._act(x, use_act=use_act) + 1

            @torch.jit.export
            def features(self, x, use_act: Optional[bool] = None):
                if use_act is None:
                    use_act = self.use_act
                return self._act(x, use_act=use_act)

            def _act(self, x, use_act: Optional[bool] = None):
                if use_act is None:
                    use_act = self.use_act
                return x.relu() if use_act else x
        """)
    assert result.changes[0].lifted == {"use_act": "use_act"}


# ---- the lifted type serves every use -----------------------------------------------------------

def _one_setting(init: str, forward: str, params: str = "self, n") -> Rewrite:
    body = textwrap.indent(textwrap.dedent(forward).strip() + "\n", " " * 8)
    return rewrite("import torch.nn as nn\n"
                   "class M(nn.Module):\n"
                   f"    def __init__({params}):\n"
                   "        super().__init__()\n"
                   f"        {init}\n"
                   "    def forward(self, x):\n" + body)


def test_a_count_the_loop_ranges_over_and_compares_is_an_int() -> None:
    # ParityBench: a required constructor argument, a truth test, range() and `<`; it was lifted
    # as Optional[bool], which failed to re-script.
    result = _one_setting("self.num_layers = num_layers", """
        if not self.num_layers:
            return x
        for i in range(self.num_layers):
            if i < self.num_layers - 1:
                x = x.relu()
        return x
        """, params="self, num_layers")
    assert "def forward(self, x, num_layers: Optional[int] = None):" in result.text
    assert "self.num_layers" not in result.text.split("def forward")[1].replace(
        "num_layers = self.num_layers", "")
    assert [f[0] for f in fixes(result)] == ["TSF204", "TSF204"]


@pytest.mark.parametrize(("init", "forward", "params", "kind"), [
    # A slice bound needs an int; the truth test takes any type.
    ("self.n = n", "if self.n:\n    x = x[:self.n]\nreturn x", "self, n", "int"),
    # A float literal compared with it makes it a float.
    ("self.n = n", "if self.n >= 0.5:\n    x = x * self.n\nreturn x", "self, n", "float"),
    # An int literal in arithmetic beside a comparison makes it an int.
    ("self.n = n", "if x.size(0) > self.n + 1:\n    x = x * 2\nreturn x", "self, n", "int"),
    # Arithmetic in __init__ on an int default; len() is an int.
    ("self.n = n - 1", "if self.n:\n    x = x * self.n\nreturn x", "self, n=3", "int"),
    ("self.n = len(n)", "if self.n:\n    x = x * self.n\nreturn x", "self, n=(1, 2)", "int"),
    ("self.n = n / 2", "if self.n:\n    x = x * self.n\nreturn x", "self, n=3", "float"),
    # A str compared with literals, or joined with one.
    ("self.n = n", "if self.n == 'avg':\n    x = x * 2\nreturn x", "self, n", "str"),
    ("self.n = n", "if self.n:\n    print('mode ' + self.n)\nreturn x", "self, n", "str"),
    # A bare truth test alone is a bool.
    ("self.n = n", "if self.n:\n    x = x * 2\nreturn x", "self, n", "bool"),
])
def test_the_uses_decide_a_type_init_does_not_give(init: str, forward: str, params: str,
                                                   kind: str) -> None:
    result = _one_setting(init, forward, params)
    assert f"def forward(self, x, n: Optional[{kind}] = None):" in result.text, (
        result.text, reasons(result))


@pytest.mark.parametrize(("init", "forward", "params", "reason"), [
    # A number only multiplied into tensors: int or float cannot be told.
    ("self.n = n", "if self.n:\n    x = x * self.n\nreturn x", "self, n",
     "self.n is used as a number (`x * self.n`) but __init__ gives it no default, literal or "
     "annotation, so whether it is an int or a float is unknown (a lifted argument must have "
     "its exact type); annotate the constructor parameter"),
    # The value __init__ gives serves no use that needs an int.
    ("self.n = n", "if self.n:\n    for _ in range(self.n):\n        x = x * 2\nreturn x",
     "self, n=0.5", "self.n is a float but `range(self.n)` needs an int: no lifted type "
                    "serves every use"),
    ("self.n = n", "if self.n:\n    x = x[self.n]\nreturn x", "self, n=True",
     "self.n is a bool but `x[self.n]` needs an int index (or a str key): no lifted type "
     "serves every use"),
    # Literals of different types.
    ("self.n = n", "if self.n == 1 or self.n == 'a':\n    x = x * 2\nreturn x", "self, n",
     "self.n is compared with values of different types"),
])
def test_a_setting_no_type_serves_is_refused_with_the_use(init: str, forward: str,
                                                          params: str, reason: str) -> None:
    result = _one_setting(init, forward, params)
    assert not result.changed
    assert reason in reasons(result)
    assert {code for code, _, _ in refusals(result)} == {"TSF204"}


def test_the_length_of_a_submodule_list_is_structure_not_a_setting() -> None:
    # torchaudio's Tacotron2 postnet: self.n_convs = len(self.convolutions).
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, depth=3):
                super().__init__()
                self.convs = nn.ModuleList([nn.Linear(4, 4) for _ in range(depth)])
                self.n_convs = len(self.convs)
            def forward(self, x):
                for i, conv in enumerate(self.convs):
                    x = conv(x)
                    if i < self.n_convs - 1:
                        x = x.relu()
                return x
        """)
    assert not result.changed
    assert refusals(result) == [(None, 11, "self.n_convs is the length of submodule self.convs, "
                                 "not a setting")]


def test_observed_example_builds_type_a_required_constructor_argument() -> None:
    # ParityBench tables pass ints to switches tested for truth: with the example runs
    # observed (annotate asks for them), the observed type wins over the bool guess.
    code = textwrap.dedent("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, residual):
                super().__init__()
                self.residual = residual
            def forward(self, x):
                if self.residual:
                    x = x + 1
                return x
        """)
    guessed = rewrite_source(code, RewriteSettings([LiftBranch]), "m.py")
    assert "residual: Optional[bool] = None" in guessed.text
    observed = rewrite_source(
        code,
        RewriteSettings([LiftBranch]),
        FileContext("m.py", observed={"M": {"__init__": {"residual": "int"}}}),
    )
    assert "residual: Optional[int] = None" in observed.text
    # A type that is no setting's (a list) is not taken: the uses decide, as before.
    listed = rewrite_source(
        code,
        RewriteSettings([LiftBranch]),
        FileContext("m.py", observed={"M": {"__init__": {"residual": "List[int]"}}}),
    )
    assert "residual: Optional[bool] = None" in listed.text


# ---- config objects: followed to the field read, never lifted themselves ------------------------

def test_a_config_node_kept_on_the_module_is_followed_to_its_fields() -> None:
    # ParityBench (YACS): self.NETWORK = self.config.NETWORK; it was lifted as Optional[bool].
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.NETWORK = self.config.NETWORK
                self.fc = nn.Linear(4, 4)
            def forward(self, x):
                y = self.fc(x) * self.NETWORK.SCALE
                if self.NETWORK.SKIP:
                    y = y + x
                if self.config.NETWORK.RELU:
                    y = y.relu()
                return y
        """)
    assert result.text == textwrap.dedent("""
        from typing import Optional

        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.RELU = self.config.NETWORK.RELU
                self.NETWORK = self.config.NETWORK
                self.SCALE = self.NETWORK.SCALE
                self.SKIP = self.NETWORK.SKIP
                self.fc = nn.Linear(4, 4)
            def forward(self, x, SKIP: Optional[bool] = None, RELU: Optional[bool] = None):
                if SKIP is None:
                    SKIP = self.SKIP
                if RELU is None:
                    RELU = self.RELU
                y = self.fc(x) * self.SCALE
                if SKIP:
                    y = y + x
                if RELU:
                    y = y.relu()
                return y
        """)
    holder = "reads a field of config object"
    assert sorted(fixes(result)) == [
        ("TSF203", 10, f"self.NETWORK.SCALE {holder} 'self.NETWORK'"),
        ("TSF203", 11, f"self.NETWORK.SKIP {holder} 'self.NETWORK'"),
        ("TSF203", 13, f"self.config.NETWORK.RELU {holder} 'self.config'"),
        ("TSF204", 11, branch("NETWORK.SKIP")),
        ("TSF204", 13, branch("config.NETWORK.RELU"))]


def test_a_chain_of_fields_read_by_key_is_copied_as_written() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, cfg):
                super().__init__()
                self.cfg = cfg
            def forward(self, x):
                if self.cfg["net"]["use-skip"]:
                    x = x + 1
                return x
        """)
    assert 'self.use_skip = self.cfg["net"]["use-skip"]' in result.text
    assert "use_skip: Optional[bool] = None" in result.text


def test_a_node_field_decided_in_init_through_the_parameter_is_structural() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.config = config
                self.NETWORK = self.config.NETWORK
                if config.NETWORK.USE_PROJ:
                    self.proj = nn.Linear(4, 4)
            def forward(self, x):
                if self.NETWORK.USE_PROJ:
                    x = self.proj(x)
                return x
        """)
    # The field is copied (a ScriptModule cannot hold the node) but not lifted.
    assert "self.USE_PROJ = self.NETWORK.USE_PROJ" in result.text
    assert "if self.USE_PROJ:" in result.text
    assert refusals(result) == [("TSF204", 11, "self.NETWORK.USE_PROJ decides which submodules "
                                 "__init__ builds (line 8); both branches must compile")]


def test_an_object_whose_fields_are_read_is_never_lifted() -> None:
    # Not shown to be a config object (the parameter's name says nothing): refused, with why.
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, network):
                super().__init__()
                self.net = network
            def forward(self, x):
                if self.net.use_skip:
                    x = x + 1
                return x
        """)
    assert not result.changed
    assert refusals(result) == [("TSF204", 8, "self.net is an object whose fields are read "
                                 "(`self.net.use_skip`), not a setting")]


def test_a_node_read_by_a_computed_key_is_not_copied() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self, config, name="a"):
                super().__init__()
                self.config = config
                self.name = name
            def forward(self, x):
                return x * self.config.NETWORK[self.name]
        """)
    assert not result.changed
    assert refusals(result) == [("TSF203", 9, "the field is not named by a string literal; "
                                 "only fields read by name are copied")]


# ---- tsfix check: fixtures/check/blockers.py -----------------------------------------------------

def test_blockers_fixture_findings() -> None:
    """One finding of each code per class marked with it: fixed, or refused with the reason."""
    found = rewrite_source(
        BLOCKERS.read_text(), RewriteSettings([LiftBranch], output=False), "blockers.py"
    )
    assert [(f.class_name, f.code, f.line, f.message) for f in found.fixes] == [
        ("ConfigObject", "TSF203", 181, "self.cfg.scale reads a field of config object "
                                        "'self.cfg'"),
        ("ConfigBranch", "TSF204", 192, branch("use_act")),
        ("ReturnsByFlag", "TSF204", 312, branch("return_skip")),
        *[("NameBoundUnderSetting", "TSF204", line, branch("freq")) for line in (405, 409)]]
    assert [(s.class_name, s.code, s.line, s.reason) for s in found.skips] == [
        ("NoneModeCompared", "TSF204", 137, "self.mode comes from mode, which may be None"),
        ("FunctionTestedForNone", None, 148, "self.act holds a function, not configuration"),
        # constant-flag fixes these (TSF231); lift-branch says why it does not lift them.
        *[("PoolByType", "TSF204", line, "self.pool_type decides which submodules __init__ "
           "builds (line 347); both branches must compile") for line in (353, 355)]]


@pytest.mark.parametrize("declaration", ['__constants__ = ["use_proj"]',
                                         "use_proj: torch.jit.Final[bool]"])
def test_a_torchscript_constant_is_never_lifted(declaration: str) -> None:
    """constant-flag makes a setting that decides the return type a constant; lifted into an
    argument, its test would be compiled both ways again."""
    result = rewrite(f"""\
        import torch
        import torch.nn as nn


        class Block(nn.Module):
            {declaration}

            def __init__(self, use_proj: bool = True, scale: float = 2.0):
                super().__init__()
                self.use_proj = use_proj
                self.scale = scale

            def forward(self, x):
                if self.use_proj:
                    return x, x
                if self.scale > 1.0:
                    x = x * self.scale
                return x
        """)
    assert "use_proj: Optional" not in result.text
    assert "scale: Optional[float] = None" in result.text     # the other setting still is
    assert any("self.use_proj is a TorchScript constant" in reason
               for reason in reasons(result))


def test_a_parameter_init_binds_again_is_not_the_settings_type() -> None:
    """bottleneck-transformer's BottleStack: `fmap_size = pair(fmap_size)` makes a tuple of
    the int the caller passed; lifted with the parameter's (observed) type, the attribute
    became `Optional[int]` and the class stopped scripting on the assignment."""
    code = """
        import torch
        from torch import nn


        def pair(x):
            return (x, x) if not isinstance(x, tuple) else x


        class Stack(nn.Module):
            def __init__(self, dim, fmap_size: int = 8):
                super().__init__()
                fmap_size = pair(fmap_size)
                self.fmap_size = fmap_size
                self.proj = nn.Linear(dim, dim)

            def forward(self, x):
                if x.shape[-1] == self.fmap_size[1]:
                    return self.proj(x)
                return x
    """
    result = rewrite(code)
    assert result.text == textwrap.dedent(code)
    assert reasons(result) == ["self.fmap_size comes from fmap_size, which __init__ binds "
                               "again: its type is unknown"]
