"""constant-flag: which settings become constants (a bool itself, any other value as a bool
copy whose truth reads replace the setting's), where ``__constants__`` goes (new, extended,
with a base's names), the callers that unpack a fixed class's result, and what is refused with
the reason (a test on data, a setting assigned after construction, a container, a foreign base).
The slow test scripts the rewrites for every setting value (0, None, a count, True, False) and
compares with eager. The fixture pairs are tests/test_fixtures.py's."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from conftest import FIXTURES_ROOT, load_module, rule_rewriter
from tsfix.codemods.lint.check import check_source
from tsfix.codemods.pipeline.rewrite import rewrite_source
from tsfix.codemods.pipeline.settings import RewriteSettings
from tsfix.codemods.rules.constant_flag import ConstantFlag

COMMENT = "    # TorchScript compiles only the branch a constant bool test takes.\n"

BLOCK = """\
import torch
from torch import nn
class Block(nn.Module):
    def __init__(self, skip_chan):
        super().__init__()
        self.skip_chan = skip_chan
        self.res = nn.Conv1d(4, 4, 1)
        if skip_chan:
            self.skip = nn.Conv1d(4, skip_chan, 1)
    def forward(self, x):
        res = self.res(x)
        if not self.skip_chan:
            return res
        return res, self.skip(x)
"""

NETWORK = """\
class Net(nn.Module):
    def __init__(self, skip_chan=4, depth=2):
        super().__init__()
        self.skip_chan = skip_chan
        self.blocks = nn.ModuleList([Block(skip_chan) for _ in range(depth)])
    def forward(self, x):
        total = torch.zeros(1)
        for block in self.blocks:
            out = block(x)
            if self.skip_chan:
                res, skip = out
                total = total + skip
            else:
                res = out
            x = x + res
        return total if self.skip_chan else x
"""


rewrite = rule_rewriter(ConstantFlag)


def test_an_int_setting_gets_a_bool_copy_that_its_truth_tests_read() -> None:
    result = rewrite(BLOCK)
    assert COMMENT + '    __constants__ = ["has_skip_chan"]\n' in result.text
    assert ("        self.skip_chan = skip_chan\n"
            "        self.has_skip_chan = bool(self.skip_chan)\n") in result.text
    assert "        if not self.has_skip_chan:\n" in result.text
    # __init__'s own test reads the constructor argument: untouched.
    assert "        if skip_chan:\n" in result.text
    [change] = result.changes
    assert change.class_name == "Block"
    assert "bakes self.skip_chan (as self.has_skip_chan) per instance" in change.notes[0]
    [fix] = result.fixes
    assert (fix.code, fix.line) == ("TSF118", 14)


def test_a_bool_setting_is_named_itself() -> None:
    for parameter in ("return_both=False", "return_both: bool"):
        result = rewrite(f"""
            import torch
            class M(torch.nn.Module):
                def __init__(self, {parameter}):
                    super().__init__()
                    self.return_both = return_both
                def forward(self, x):
                    if self.return_both:
                        return x, x
                    return x
            """)
        assert '    __constants__ = ["return_both"]\n' in result.text
        assert "has_" not in result.text and "        if self.return_both:\n" in result.text


def test_every_truth_read_of_the_setting_in_compiled_code_reads_the_copy() -> None:
    result = rewrite("""
        import torch
        class M(torch.nn.Module):
            def __init__(self, mode=""):
                super().__init__()
                self.mode = mode
            def forward(self, x):
                y = x + 1 if self.mode and x.dim() > 1 else x
                while not self.mode:
                    break
                if self.mode is None:
                    return x
                if self.mode:
                    return y, x
                return y
            @torch.jit.ignore
            def describe(self):
                return "on" if self.mode else "off"
        """)
    text = result.text
    assert "y = x + 1 if self.has_mode and x.dim() > 1 else x" in text
    assert "while not self.has_mode:" in text
    assert "if self.has_mode:\n" in text
    # Not truth tests, or not compiled: left as they are.
    assert "if self.mode is None:" in text
    assert 'return "on" if self.mode else "off"' in text


def test_an_existing_literal_is_extended() -> None:
    for literal, extended in (('["scale"]', '["scale", "has_k"]'),
                              ('("scale",)', '("scale", "has_k")'),
                              ('{"scale"}', '{"scale", "has_k"}')):
        result = rewrite(f"""
            import torch
            class M(torch.nn.Module):
                __constants__ = {literal}
                def __init__(self, k=2):
                    super().__init__()
                    self.scale = 2
                    self.k = k
                def forward(self, x):
                    if self.k:
                        return x, x
                    return x
            """)
        assert f"    __constants__ = {extended}\n" in result.text
        assert "# TorchScript" not in result.text


def test_a_new_list_keeps_the_names_a_base_of_the_file_lists() -> None:
    result = rewrite("""
        import torch
        class Base(torch.nn.Module):
            __constants__ = ["scale"]
            def __init__(self):
                super().__init__()
                self.scale = 2
        class M(Base):
            \"\"\"Doc.\"\"\"
            def __init__(self, k=2):
                super().__init__()
                self.k = k
            def forward(self, x):
                if self.k:
                    return x, x
                return x
        """)
    assert ('    """Doc."""\n\n' + COMMENT + '    __constants__ = ["scale", "has_k"]\n'
            in result.text)


def test_the_copy_name_does_not_clash() -> None:
    result = rewrite("""
        import torch
        class M(torch.nn.Module):
            def __init__(self, k=2):
                super().__init__()
                self.k = k
                self.has_k = True
            def forward(self, x):
                if self.k:
                    return x, x
                return x
        """)
    assert "self.has_k_flag = bool(self.k)" in result.text
    assert "if self.has_k_flag:" in result.text


def test_a_class_that_unpacks_a_fixed_result_under_its_own_setting_is_fixed_too() -> None:
    result = rewrite(BLOCK + NETWORK)
    assert [c.class_name for c in result.changes] == ["Block", "Net"]
    text = result.text
    assert text.count("__constants__") == 2
    assert "        self.has_skip_chan = bool(self.skip_chan)\n" in text.split("class Net")[1]
    assert "            if self.has_skip_chan:\n                res, skip = out" in text
    assert "return total if self.has_skip_chan else x" in text
    assert "it unpacks Block's result by it" in result.changes[1].summary


def test_a_class_building_a_fixed_class_without_unpacking_is_left_alone() -> None:
    result = rewrite(BLOCK + """
class Wrapper(nn.Module):
    def __init__(self, skip_chan=4, scale=True):
        super().__init__()
        self.scale = scale
        self.block = Block(skip_chan)
    def forward(self, x):
        if self.scale:
            x = x * 2
        return x
""")
    assert [c.class_name for c in result.changes] == ["Block"]


REFUSED = {
    "data": ("""
        def __init__(self):
            super().__init__()
        def forward(self, x):
            if x.dim() == 2:
                return x
            return x, x
        """, "chosen by `x.dim() == 2`, which reads more than settings"),
    "no_test": ("""
        def __init__(self):
            super().__init__()
        def forward(self, x):
            for _ in range(2):
                return x
            return x, x
        """, "not chosen by a test"),
    "assigned_later": ("""
        def __init__(self, k=1):
            super().__init__()
            self.k = k
        def set_k(self, k: int):
            self.k = k
        def forward(self, x):
            if self.k:
                return x, x
            return x
        """, "self.k is assigned in set_k() too"),
    "assigned_twice": ("""
        def __init__(self, k=1):
            super().__init__()
            self.k = k
            if k > 3:
                self.k = 3
        def forward(self, x):
            if self.k:
                return x, x
            return x
        """, "not set by exactly one plain assignment in __init__ (2 found)"),
    "list": ("""
        def __init__(self):
            super().__init__()
            self.sizes = [1, 2]
        def forward(self, x):
            if self.sizes:
                return x, x
            return x
        """, "self.sizes holds a List[int], not a setting"),
    "submodule": ("""
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(2, 2)
        def forward(self, x):
            if self.proj:
                return x, x
            return x
        """, "is a submodule, parameter or buffer"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_refusals_say_why_and_check_shows_the_reason(case: str) -> None:
    body, reason = REFUSED[case]
    source = "import torch\nclass M(torch.nn.Module):\n" + textwrap.indent(
        textwrap.dedent(body).strip("\n"), "    ") + "\n"
    result = rewrite_source(source, RewriteSettings([ConstantFlag]), "m.py")
    assert result.text == source and not result.changes
    [skip] = result.skips
    assert skip.code == "TSF118" and reason in skip.reason, skip.reason
    [finding] = [f for f in check_source(source, "m.py") if f.code == "TSF118"]
    assert finding.fix is None and reason in finding.refused


def test_a_literal_it_cannot_extend_and_a_foreign_base_are_refused() -> None:
    method = """
    def __init__(self, k=1):
        super().__init__()
        self.k = k
    def forward(self, x):
        if self.k:
            return x, x
        return x
"""
    for head, reason in (
            ("class M(torch.nn.Module):\n    __constants__ = NAMES\n",
             "__constants__ is not a list, tuple or set literal"),
            ("from pkg.base import Base\nclass M(Base):\n",
             "its base pkg.base.Base is defined in another file")):
        source = "import torch\nNAMES = []\n" + head + method
        result = rewrite_source(source, RewriteSettings([ConstantFlag]), "m.py")
        assert result.text == source and not result.changes
        [skip] = result.skips
        assert skip.code == "TSF118" and reason in skip.reason, skip.reason


def test_check_names_the_rule_for_a_site_it_fixes() -> None:
    [finding] = [f for f in check_source(BLOCK, "m.py") if f.code == "TSF118"]
    assert (finding.line, finding.fix) == (14, "constant-flag")


@pytest.mark.slow
def test_the_rewrites_script_for_every_setting_value_with_eager_parity(tmp_path: Path) -> None:
    """Measured: the original fails to script for every value (the constant-free test compiles
    both returns; None is no bool); the rewrite scripts with the original's outputs."""
    torch = pytest.importorskip("torch")
    source = BLOCK + NETWORK + """
class Flagged(nn.Module):
    def __init__(self, return_both=False):
        super().__init__()
        self.return_both = return_both
    def forward(self, x):
        if self.return_both:
            return x * 2, x
        return x * 2
"""
    modules = []
    for index, text in enumerate((source, rewrite(source).text)):
        path = tmp_path / f"constant_flag_case_{index}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = loaded
        spec.loader.exec_module(loaded)
        modules.append(loaded)
    builds: list[tuple[str, dict[str, object]]] = [
        ("Block", {"skip_chan": 3}), ("Block", {"skip_chan": 0}), ("Block", {"skip_chan": None}),
        ("Net", {}), ("Net", {"skip_chan": 0}), ("Net", {"skip_chan": None}), ("Flagged", {}),
        ("Flagged", {"return_both": True})]
    x = torch.randn(2, 4, 6)
    for name, init in builds:
        torch.manual_seed(0)
        original = getattr(modules[0], name)(**init).eval()
        torch.manual_seed(0)
        rewritten = getattr(modules[1], name)(**init).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(Exception):  # noqa: B017 - TorchScript raises several kinds
                torch.jit.script(original)
            scripted = torch.jit.script(rewritten)
        expected, got = original(x), scripted(x)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = got if isinstance(got, tuple) else (got,)
        assert len(got) == len(expected), (name, init)
        for want, have in zip(expected, got, strict=True):
            assert torch.equal(want, have), (name, init)


# ---- attributes __init__ builds only under a test (TSF231) ------------------------------------

POOL = """\
import torch
from torch import nn
class Pool(nn.Module):
    def __init__(self, pool_type='avg'):
        super().__init__()
        self.pool_type = pool_type
        if pool_type == 'avg':
            self.avg_pool = nn.AdaptiveAvgPool1d(1)
        elif pool_type == 'max':
            self.max_pool = nn.AdaptiveMaxPool1d(1)
    def forward(self, x):
        if self.pool_type == 'avg':
            x = self.avg_pool(x)
        elif self.pool_type == 'max':
            x = self.max_pool(x)
        return x
"""


def test_each_test_of_an_elif_chain_guarding_a_conditional_attribute_reads_a_bool_copy() -> None:
    result = rewrite(POOL)
    text = result.text
    assert COMMENT + '    __constants__ = ["pool_type_is_avg", "pool_type_is_max"]\n' in text
    # Stored right after the setting, evaluated as the test was.
    assert ("        self.pool_type = pool_type\n"
            '        self.pool_type_is_avg = self.pool_type == "avg"\n'
            '        self.pool_type_is_max = self.pool_type == "max"\n') in text
    assert "        if self.pool_type_is_avg:\n            x = self.avg_pool(x)\n" in text
    assert "        elif self.pool_type_is_max:\n            x = self.max_pool(x)\n" in text
    # __init__'s own tests are left as they are.
    assert "        if pool_type == 'avg':\n" in text
    assert [(f.code, f.line) for f in result.fixes] == [("TSF231", 12), ("TSF231", 14)]
    assert "self.avg_pool exists only for some configurations" in result.fixes[0].message
    [change] = result.changes
    assert "it guards self.avg_pool, self.max_pool" in change.summary


def test_a_bool_setting_tested_alone_is_named_itself_and_a_none_test_needs_nothing() -> None:
    result = rewrite("""
        import torch
        from torch import nn
        class Norm(nn.Module):
            def __init__(self, chan, use_bn=True, act=None):
                super().__init__()
                self.use_bn = use_bn
                self.act = act
                if use_bn:
                    self.bn = nn.BatchNorm1d(chan)
                if act is not None:
                    self.relu = nn.ReLU()
            def forward(self, x):
                if self.use_bn:
                    x = self.bn(x)
                if self.act is not None:
                    x = self.relu(x)
                return x
        """)
    assert '    __constants__ = ["use_bn"]\n' in result.text
    assert "if self.use_bn:" in result.text and "if self.act is not None:" in result.text
    assert [f.line for f in result.fixes] == [14]


def test_an_attribute_built_past_an_early_return_and_read_past_one_is_guarded() -> None:
    """A published tabular model's shape: ``__init__`` returns early for one setting value and
    builds the mask only past that return; forward returns early under the same setting and
    reads the mask after. The setting, a bool literal in each branch, is named itself."""
    result = rewrite("""
        import torch
        from torch import nn
        class Embed(nn.Module):
            def __init__(self, n, cat=()):
                super().__init__()
                if not cat:
                    self.skip = True
                    return
                else:
                    self.skip = False
                self.mask = torch.ones(n, dtype=torch.bool)
            def forward(self, x):
                if self.skip: return x
                out = []
                for i, keep in enumerate(self.mask):
                    if keep:
                        out.append(x[:, i])
                return torch.stack(out, 1)
        """)
    assert '    __constants__ = ["skip"]\n' in result.text
    assert [(f.code, f.line) for f in result.fixes] == [("TSF231", 14)]
    assert not result.skips


def test_copies_of_other_tests_keep_their_truth_value() -> None:
    result = rewrite("""
        import torch
        from torch import nn
        class M(nn.Module):
            def __init__(self, mode='a', scale=1, tag=None):
                super().__init__()
                self.mode = mode
                self.scale = scale
                self.tag = tag
                if mode != 'none':
                    self.proj = nn.Identity()
                if mode in ('a', 'b') or scale:
                    self.extra = nn.Identity()
                if tag is not None and scale > 1:
                    self.tagged = nn.Identity()
            def forward(self, x):
                if self.mode != 'none':
                    x = self.proj(x)
                y = self.extra(x) if self.mode in ('a', 'b') or self.scale else x
                if self.tag is not None and self.scale > 1:
                    y = self.tagged(y)
                if self.mode != 'none':
                    y = self.proj(y)
                return y
        """)
    text = result.text
    # A comparison is a bool already; `or` of a truth test is made one.
    assert '        self.mode_is_not_none = self.mode != "none"\n' in text
    assert '        self.has_extra = bool(self.mode in ("a", "b") or self.scale)\n' in text
    assert "        self.has_tagged = self.tag is not None and self.scale > 1\n" in text
    assert "y = self.extra(x) if self.has_extra else x" in text
    # The same test twice reads one copy.
    assert text.count("if self.mode_is_not_none:") == 2 and text.count("mode_is_not_none =") == 1
    assert '    __constants__ = ["mode_is_not_none", "has_extra", "has_tagged"]\n' in text


def test_attributes_built_on_every_path_are_left_alone() -> None:
    source = textwrap.dedent("""\
        import torch
        from torch import nn
        class M(nn.Module):
            proj: nn.Module
            def __init__(self, mode='a'):
                super().__init__()
                self.mode = mode
                if mode == 'a':
                    self.norm = nn.Identity()
                elif mode == 'b':
                    self.norm = nn.ReLU()
                else:
                    raise ValueError(mode)
                if mode == 'a':
                    self.proj = nn.Identity()
            def forward(self, x):
                if self.mode == 'a':
                    x = self.norm(x)
                if self.mode == 'a':
                    x = self.proj(x)
                return x
        """)
    result = rewrite_source(source, RewriteSettings([ConstantFlag]), "m.py")
    assert result.text == source and not result.changes and not result.skips


GUARD_REFUSED = {
    "assigned_later": ("""
        def __init__(self, mode='a'):
            super().__init__()
            self.mode = mode
            if mode == 'a':
                self.proj = torch.nn.Identity()
        def set_mode(self, mode: str):
            self.mode = mode
        def forward(self, x):
            if self.mode == 'a':
                x = self.proj(x)
            return x
        """, "self.mode is assigned in set_mode() too"),
    "data": ("""
        def __init__(self, mode='a'):
            super().__init__()
            self.mode = mode
            if mode == 'a':
                self.proj = torch.nn.Identity()
        def forward(self, x):
            if self.mode == 'a' and x.dim() == 2:
                x = self.proj(x)
            return x
        """, "read under `self.mode == 'a' and x.dim() == 2`, which reads more than settings"),
    "outside": ("""
        def __init__(self, mode='a'):
            super().__init__()
            self.mode = mode
            if mode == 'a':
                self.proj = torch.nn.Identity()
        def forward(self, x):
            if self.mode == 'a':
                x = self.proj(x)
            return self.proj(x)
        """, "self.proj is read outside any test"),
    "past_an_early_return": ("""
        def __init__(self, mode='a'):
            super().__init__()
            self.mode = mode
            if mode != 'a':
                return
            self.proj = torch.nn.Identity()
        def forward(self, x):
            return self.proj(x)
        """, "self.proj is read outside any test"),
    "setting_in_a_block": ("""
        def __init__(self, mode='a'):
            super().__init__()
            if mode:
                self.mode = mode
            if mode == 'a':
                self.proj = torch.nn.Identity()
        def forward(self, x):
            if self.mode == 'a':
                x = self.proj(x)
            return x
        """, "self.mode is set inside a block of __init__, not on every path"),
}


@pytest.mark.parametrize("case", GUARD_REFUSED)
def test_guard_refusals_say_why_and_check_shows_the_reason(case: str) -> None:
    body, reason = GUARD_REFUSED[case]
    source = "import torch\nclass M(torch.nn.Module):\n" + textwrap.indent(
        textwrap.dedent(body).strip("\n"), "    ") + "\n"
    result = rewrite_source(source, RewriteSettings([ConstantFlag]), "m.py")
    assert result.text == source and not result.changes
    assert result.skips and all(s.code == "TSF231" for s in result.skips)
    assert any(reason in s.reason for s in result.skips), [s.reason for s in result.skips]
    findings = [f for f in check_source(source, "m.py") if f.code == "TSF231"]
    assert findings and all(f.fix is None for f in findings)
    assert any(reason in f.refused for f in findings)


@pytest.mark.slow
def test_guarded_attribute_rewrite_scripts_saves_and_loads_for_every_configuration(
        tmp_path: Path) -> None:
    """Measured: the original fails for every configuration ("Module 'Pool' has no attribute
    'max_pool'"); the rewrite scripts, survives save/load and gives the eager output."""
    torch = pytest.importorskip("torch")
    modules = []
    for index, text in enumerate((POOL, rewrite(POOL).text)):
        path = tmp_path / f"constant_flag_guard_{index}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = loaded
        spec.loader.exec_module(loaded)
        modules.append(loaded)
    x = torch.randn(2, 3, 5)
    for pool_type in ("avg", "max", "none"):
        original, rewritten = (module.Pool(pool_type).eval() for module in modules)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(Exception, match="has no attribute"):
                torch.jit.script(original)
            saved = tmp_path / f"{pool_type}.pt"
            torch.jit.save(torch.jit.script(rewritten), str(saved))
            loaded_back = torch.jit.load(str(saved))
        assert torch.equal(loaded_back(x), original(x)), pool_type


# ---- a local bound under a test of a setting, read under a later test of it (TSF242) --------

ENC = """\
import torch
from torch import nn
class Enc(nn.Module):
    def __init__(self, freq: bool = True):
        super().__init__()
        self.freq = freq
        self.mix = nn.Conv1d(4, 4, 1)
    def forward(self, y):
        if self.freq:
            B, C, Fr, T = y.shape
            y = y.permute(0, 2, 1, 3).reshape(-1, C, T)
        y = self.mix(y)
        if self.freq:
            y = y.view(B, Fr, C, T).permute(0, 2, 1, 3)
        return y
"""


def test_a_setting_copied_from_a_config_object_is_left_to_lift_branch() -> None:
    # transformers' YolosEncoder: lift-branch writes `self.x = self.config.x` on a first run;
    # making it constant on the second would change the file again.
    code = ENC.replace("def __init__(self, freq: bool = True):", "def __init__(self, config):"
                       ).replace("self.freq = freq", "self.config = config\n"
                                 "        self.freq = self.config.freq")
    result = rewrite(code)
    assert result.text == code
    assert next(s.reason for s in result.skips if s.code == "TSF242").endswith(
        "self.freq is a copy of `self.config.freq`, a field of a configuration object: left "
        "to lift-branch")


def test_a_setting_whose_tests_bind_and_read_a_local_becomes_constant() -> None:
    result = rewrite(ENC)
    assert result.text == ENC.replace(
        "class Enc(nn.Module):\n",
        f"class Enc(nn.Module):\n{COMMENT}    __constants__ = [\"freq\"]\n\n")
    assert [(f.code, f.line, f.message) for f in result.fixes] == [(
        "TSF242", 9, "`B`, `C`, `Fr`, `T` are bound only where `self.freq` is true and read "
        "under a later `self.freq`; TorchScript compiles both branches of each test (\"B is "
        "not defined in the false branch\")")]
    assert result.changes[0].summary == (
        "self.freq named in __constants__: `B`, `C`, `Fr`, `T` bound under it are read under "
        "a later test of it, and TorchScript compiles only the branch a constant bool test "
        "takes")


def test_a_binding_under_an_earlier_test_of_data_does_not_hide_the_site() -> None:
    # demucs' HEncLayer: B, C, Fr, T are also bound under `not self.freq and x.dim() == 4`,
    # on some paths only.
    source = ENC.replace("    def forward(self, y):\n", (
        "    def forward(self, y):\n        if not self.freq and y.dim() == 4:\n"
        "            B, C, Fr, T = y.shape\n            y = y.view(B, -1, T)\n"))
    result = rewrite(source)
    assert result.text == source.replace(
        "class Enc(nn.Module):\n",
        f"class Enc(nn.Module):\n{COMMENT}    __constants__ = [\"freq\"]\n\n")
    assert [(f.code, f.line) for f in result.fixes] == [("TSF242", 12)]


def test_a_read_under_an_and_of_the_setting_and_data_is_guarded() -> None:
    # demucs' HDemucs: `if self.hybrid and idx < len(self.tencoder): xt = tenc(xt)`; a
    # constant False operand folds the `and` (measured on torch 2.13).
    source = ENC.replace("freq: bool = True", "n_freqs=4").replace(
        "self.freq = freq", "self.n_freqs = n_freqs").replace(
        "if self.freq:", "if self.n_freqs:", 1).replace(
        "if self.freq:", "if y.dim() == 3 and self.n_freqs:")
    result = rewrite(source)
    assert result.text == source.replace(
        "class Enc(nn.Module):\n",
        f"class Enc(nn.Module):\n{COMMENT}    __constants__ = [\"has_n_freqs\"]\n\n").replace(
        "self.n_freqs = n_freqs\n",
        "self.n_freqs = n_freqs\n        self.has_n_freqs = bool(self.n_freqs)\n").replace(
        "self.n_freqs:", "self.has_n_freqs:")
    assert [(f.code, f.line) for f in result.fixes] == [("TSF242", 9)]


def test_an_else_branch_and_another_setting_kind_get_a_copy() -> None:
    source = ENC.replace("freq: bool = True", "n_freqs=4").replace(
        "self.freq = freq", "self.n_freqs = n_freqs").replace(
        "        if self.freq:\n            B,",
        "        if not self.n_freqs:\n            y = y.flatten(2)\n        else:\n"
        "            B,").replace("if self.freq:", "if self.n_freqs:")
    result = rewrite(source)
    assert result.text == source.replace(
        "class Enc(nn.Module):\n",
        f"class Enc(nn.Module):\n{COMMENT}    __constants__ = [\"has_n_freqs\"]\n\n").replace(
        "self.n_freqs = n_freqs\n",
        "self.n_freqs = n_freqs\n        self.has_n_freqs = bool(self.n_freqs)\n").replace(
        "if not self.n_freqs:", "if not self.has_n_freqs:").replace(
        "if self.n_freqs:", "if self.has_n_freqs:")
    assert [(f.code, f.line) for f in result.fixes] == [("TSF242", 9)]
    assert "is false and read under a later `self.n_freqs`" in result.fixes[0].message


def test_a_comparison_of_settings_gets_a_copy_of_the_test() -> None:
    source = ENC.replace("freq: bool = True", "layout='2d'").replace(
        "self.freq = freq", "self.layout = layout").replace(
        "if self.freq:", "if self.layout == '2d':")
    result = rewrite(source)
    assert result.text == source.replace(
        "class Enc(nn.Module):\n",
        f"class Enc(nn.Module):\n{COMMENT}    __constants__ = [\"layout_is_2d\"]\n\n").replace(
        "self.layout = layout\n",
        "self.layout = layout\n        self.layout_is_2d = self.layout == \"2d\"\n").replace(
        "if self.layout == '2d':", "if self.layout_is_2d:")
    assert [f.code for f in result.fixes] == ["TSF242"]


BRANCH_NAME_REFUSED = {
    "another_setting": ("if self.freq:", "if self.other:",
                        "`B` is also read under `self.other`, another test than the one that "
                        "binds it: a constant does not make it bound there"),
    "no_test": ("if self.freq:", "if y.dim() == 3:",
                "`B` is also read where `self.freq` may be false: a constant does not make it "
                "bound there"),
}


@pytest.mark.parametrize("case", BRANCH_NAME_REFUSED)
def test_a_read_under_no_test_of_the_binding_side_is_refused(case: str) -> None:
    first, second, reason = BRANCH_NAME_REFUSED[case]
    source = textwrap.dedent(f"""\
        import torch
        class M(torch.nn.Module):
            def __init__(self, freq: bool = True, other: bool = True):
                super().__init__()
                self.freq = freq
                self.other = other
            def forward(self, y):
                {first}
                    B = y.size(0)
                y = y + 1
                {second}
                    y = y.view(B, -1)
                return y
        """)
    result = rewrite_source(source, RewriteSettings([ConstantFlag]), "m.py")
    assert result.text == source and not result.changes
    assert [(s.code, s.line, s.reason) for s in result.skips] == [("TSF242", 8, reason)]
    [finding] = [f for f in check_source(source, "m.py") if f.code == "TSF242"]
    assert finding.fix is None and reason in finding.refused


@pytest.mark.parametrize("change", [
    # Bound before the test: bound on both paths, TorchScript compiles it.
    ("    def forward(self, y):\n",
     "    def forward(self, y):\n        B, C, Fr, T = 0, 0, 0, 0\n"),
    # Bound again before the read.
    ("        y = self.mix(y)\n", "        y = self.mix(y)\n        B, C, Fr, T = 1, 1, 1, 1\n"),
    # Bound on both paths of the test.
    ("        y = self.mix(y)\n",
     "        else:\n            B, C, Fr, T = 1, 1, 1, 1\n        y = self.mix(y)\n"),
    # The other branch never goes on (paritybench's XceptionBlock: `else: raise ...`).
    ("        y = self.mix(y)\n",
     "        else:\n            raise ValueError(\"4-d input only\")\n        y = self.mix(y)\n"),
    # A test of data, not of a setting.
    ("if self.freq:", "if y.dim() == 4:"),
])
def test_locals_bound_on_every_path_or_under_data_tests_are_no_site(
        change: tuple[str, str]) -> None:
    source = ENC.replace(*change)
    assert source != ENC
    result = rewrite(source)
    assert result.text == source and not result.fixes and not result.skips


@pytest.mark.slow
def test_branch_name_rewrite_scripts_with_parity_for_every_configuration(
        tmp_path: Path) -> None:
    """Measured: the original fails ("B is not defined in the false branch"); the rewrite
    scripts for both values and survives save/load with the eager output."""
    torch = pytest.importorskip("torch")
    modules = []
    for index, text in enumerate((ENC, rewrite(ENC).text)):
        path = tmp_path / f"constant_flag_names_{index}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = loaded
        spec.loader.exec_module(loaded)
        modules.append(loaded)
    for freq, x in ((True, torch.randn(2, 4, 3, 5)), (False, torch.randn(2, 4, 5))):
        torch.manual_seed(0)
        original = modules[0].Enc(freq).eval()
        torch.manual_seed(0)
        rewritten = modules[1].Enc(freq).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if freq:    # a failed class cannot be scripted again in this process
                with pytest.raises(Exception, match="B is not defined in the false branch"):
                    torch.jit.script(original)
            saved = tmp_path / f"{freq}.pt"
            torch.jit.save(torch.jit.script(rewritten), str(saved))
            loaded_back = torch.jit.load(str(saved))
        assert torch.equal(loaded_back(x), original(x)), freq


NONE_IN_SOME = """\
import torch
from torch import nn
class Attention(nn.Module):
    def __init__(self, dim, cross_attend=False):
        super().__init__()
        self.cross_attend = cross_attend
        self.context_norm = nn.LayerNorm(dim) if cross_attend else None
        self.act = nn.GELU() if dim > 2 else None
    def forward(self, x, context):
        if self.cross_attend:
            x = x + self.context_norm(context)
        if self.act is not None:
            x = self.act(x)
        return x
"""


def test_a_module_that_is_none_in_some_configurations_makes_its_guard_constant() -> None:
    """vit-pytorch's vat.py: the call of None under `if self.cross_attend:` compiles for the
    instance without it unless the setting is a constant. `self.act`, read under a test of
    itself, is how code that scripts already reads such a module: left alone."""
    result = rewrite(NONE_IN_SOME)
    assert result.text == NONE_IN_SOME.replace(
        "class Attention(nn.Module):\n",
        "class Attention(nn.Module):\n" + COMMENT + '    __constants__ = ["cross_attend"]\n\n')
    assert [(f.code, f.line) for f in result.fixes] == [("TSF231", 10)]


def test_a_module_none_in_some_configurations_read_outside_a_setting_test_is_left() -> None:
    outside = NONE_IN_SOME.replace("        return x\n",
                                   "        return x if context is None else "
                                   "self.context_norm(x)\n")
    assert rewrite(outside).text == outside
    by_itself = NONE_IN_SOME.replace("if self.cross_attend:", "if self.context_norm is not None:")
    assert rewrite(by_itself).text == by_itself


@pytest.mark.slow
def test_the_cross_attention_fixture_fails_to_script_before_and_scripts_after() -> None:
    torch = pytest.importorskip("torch")
    folder = FIXTURES_ROOT / "constant-flag"
    before = load_module(folder / "cross_attention.in.py", "cross_attention_before")
    after = load_module(folder / "cross_attention.out.py", "cross_attention_after")
    with pytest.raises(RuntimeError, match="cannot call a value of type 'NoneType'"):
        torch.jit.script(before.Attention(8))
    x, context = torch.randn(2, 5, 8), torch.randn(2, 3, 6)
    for init in ({"dim": 8}, {"dim": 8, "dim_context": 6, "cross_attend": True}):
        torch.manual_seed(0)
        original = before.Attention(**init).eval()
        rewritten = after.Attention(**init).eval()
        rewritten.load_state_dict(original.state_dict())
        scripted = torch.jit.script(rewritten)
        with torch.no_grad():
            torch.testing.assert_close(scripted(x, context), original(x, context),
                                       rtol=1e-4, atol=1e-5)


# glom-pytorch's ConsensusAttention: the buffer is registered only under the setting's test.
REGISTERED = """\
import torch
from torch import nn


class Consensus(nn.Module):
    def __init__(self, radius=0):
        super().__init__()
        self.radius = radius
        if self.radius > 0:
            self.register_buffer("non_local_mask", torch.eye(3, dtype=torch.bool))

    def forward(self, sim):
        if self.radius > 0:
            sim = sim.masked_fill(self.non_local_mask, -1e4)
        return sim.softmax(dim=-1)
"""


def test_a_buffer_registered_only_under_a_test_is_guarded_by_a_constant() -> None:
    result = rewrite(REGISTERED)

    assert '    __constants__ = ["radius_gt_0"]\n' in result.text, result.text
    assert "        self.radius_gt_0 = self.radius > 0\n" in result.text
    assert "        if self.radius_gt_0:\n            sim = sim.masked_fill(" in result.text
    assert [f.line for f in result.fixes if f.code == "TSF231"] == [13], result.fixes


@pytest.mark.slow
def test_the_guarded_buffer_scripts_in_both_configurations(tmp_path: Path) -> None:
    import torch

    modules = []
    for name, text in (("consensus_before", REGISTERED),
                       ("consensus_after", rewrite(REGISTERED).text)):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        modules.append(load_module(path, name))
    before, after = modules
    sim = torch.randn(2, 3, 3)
    for radius in (0, 1):
        if radius == 0:
            with pytest.raises(Exception, match="has no attribute 'non_local_mask'"):
                torch.jit.script(before.Consensus(radius))
        want = before.Consensus(radius)(sim)
        assert torch.equal(torch.jit.script(after.Consensus(radius))(sim), want)
