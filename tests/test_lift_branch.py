"""lift-branch decisions beyond the embedded examples: what it lifts, what it refuses, names."""

from __future__ import annotations

import textwrap

import libcst as cst
from tsfix.codemods.pipeline.rewrite import Rewrite, rewrite_source
from tsfix.codemods.rules.lift_branch import LiftBranch


def rewrite(code: str) -> Rewrite:
    result = rewrite_source(textwrap.dedent(code), "m.py", [LiftBranch])
    cst.parse_module(result.text)
    return result


def reasons(result: Rewrite) -> list[str]:
    return [s.reason for s in result.skips]


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
    assert "flag_value: Optional[bool] = None" in result.text
    assert "if flag_value and flag:" in result.text
    assert result.changes[0].lifted == {"flag_value": "flag"}


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
    assert "def forward(self, x, *rest, mode: Optional[str] = None):" in result.text


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
    assert any("decides which submodules" in r for r in reasons(result))


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
    assert reasons(result) == ["self.use_x is not assigned in M.__init__"]


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
    joined = " | ".join(reasons(result))
    assert "may be None" in joined and "compared with None" in joined


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
    assert "act: Optional[str] = None" in result.text
    assert "self.act = self.cfg.act" in result.text


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
    assert "threshold: Optional[float] = None" in result.text


def test_one_line_forward_body_gets_a_block() -> None:
    result = rewrite("""
        import torch.nn as nn
        class M(nn.Module):
            def __init__(self):
                super().__init__()
                self.neg = False
            def forward(self, x): return -x if self.neg else x
        """)
    assert "if neg is None:" in result.text
    assert "return -x if neg else x" in result.text


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
    assert "from typing import List, Optional\n" in result.text
    assert result.text.count("Optional\n") == 1


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
    assert result.text.startswith("\nimport math\nfrom typing import Optional\n\nimport torch")


def test_formatting_never_touches_lines_the_rule_left_alone() -> None:
    code = "\n\nimport torch.nn as nn\nx = [1,\n  2]\nclass M(nn.Module):\n" \
           "    def __init__(self):\n        super().__init__()\n        self.flag = True\n" \
           "    def forward(self, x):\n        return x if self.flag else -x\n"
    result = rewrite_source(code, "m.py", [LiftBranch])
    assert result.text.startswith("\n\n")           # black alone would drop these
    assert "x = [1,\n  2]\n" in result.text         # and reformat this


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
    result = rewrite_source(code, "m.py", [LiftBranch], skip_classes={"lift-branch":
                                                                     frozenset({"A"})})
    assert [c.class_name for c in result.changes] == []   # B does not assign flag itself
    assert "class A(nn.Module):" in result.text and "Optional" not in result.text


def test_non_module_classes_are_ignored() -> None:
    result = rewrite("""
        class Config:
            def __init__(self):
                self.flag = True
            def forward(self, x):
                return x if self.flag else -x
        """)
    assert not result.changed
