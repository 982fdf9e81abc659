"""``lift-branch``: config-attribute branches in ``forward()`` become a typed argument.

What it does
    Finds tests in the methods TorchScript compiles (``forward()``, ``@torch.jit.export``
    methods, and the methods they call; never a ``@torch.jit.ignore``/``unused`` method or code
    under ``if not torch.jit.is_scripting():``) that read a configuration attribute --
    ``if self.use_x:``, ``elif self.mode == "avg":``, ``while i < self.depth``,
    ``a if self.flag else b``, ``self.a and not self.b`` -- and turns each such attribute into a
    ``forward()`` parameter ``use_x: Optional[bool] = None`` that defaults to the attribute::

        def forward(self, x, use_x: Optional[bool] = None):
            if use_x is None:
                use_x = self.use_x
            if use_x:
                ...

    Every read of the attribute in the compiled methods then reads the local. Helper methods that
    read it get the same parameter, passed on by their callers (``self._fuse(a, use_x=use_x)``).
    Fields of config objects (``self.cfg.use_x``, ``self.cfg["use_x"]``) that the compiled methods
    read are first copied to plain attributes in ``__init__`` (``self.use_x = self.cfg.use_x``).
    An ``@torch.jit.export`` method that reads a setting gets the same parameter in its own
    signature (it is an entry point like ``forward()``); ``forward()`` gets it only when it
    reads the setting or calls a method that does.

Why it breaks export
    ``torch.jit.freeze``, ``Final`` attributes, the TorchScript-based ONNX exporter and
    ``torch.export`` turn module attributes into constants, so the exported artifact keeps only the
    branch chosen at construction. A graph input keeps every branch: one artifact serves every
    configuration, and the caller chooses at run time. Config objects (dataclasses, namespaces,
    dicts) cannot be held by a ScriptModule at all.

Example
    Before::

        class Net(nn.Module):
            def __init__(self, branch_testing=True):
                super().__init__()
                self.branch_testing = branch_testing
                self.act = Swish()

            def forward(self, x):
                if self.branch_testing == True:
                    x = self.act(x)
                return x

    After::

        class Net(nn.Module):
            ...
            def forward(self, x, branch_testing: Optional[bool] = None):
                if branch_testing is None:
                    branch_testing = self.branch_testing
                if branch_testing == True:
                    x = self.act(x)
                return x

Fix safety
    Safe for callers: the new parameter comes last and defaults to the attribute, so existing calls,
    state dicts and eager behaviour are unchanged. The attribute is read at call time, as before.
    Never lifted: ``self.training``; submodules, parameters and buffers; attributes assigned outside
    ``__init__``; tensors and values that may be None; values computed in ``__init__`` whose type
    cannot be known; and structural flags, i.e. attributes whose value decides in ``__init__``
    which submodules exist (both branches must compile, and the other branch's modules are absent)
    or is passed to a submodule's constructor (the submodule keeps the value it was built with:
    ``self.attn = Attention(dim, causal=causal)`` and ``if self.causal:`` in ``forward()``). The
    constructor may be in ``torch.nn``, this file, or another file of the user's tree, found
    through the imports as Python would (``from pkg.inner import Attention``, ``from .inner
    import ...``, ``*`` imports, re-exports; ``codemods/facts/project.py``) and read, never
    imported. When its
    class cannot be read -- an installed package, a class with a base from one, a relative import
    whose file is missing -- it is taken to build a module and the flag is not lifted; a class
    shown not to be an ``nn.Module`` (a dataclass, the standard library), a function, and torch
    outside ``torch.nn`` do not make a flag structural (a factory function that builds a module
    from the flag is not followed); and settings that a ``@torch.jit.ignore`` method called from
    compiled code also reads (it runs in Python and would read the attribute, not the argument).
    Every site is reported: each read of a setting in a test (``TSF204``) and each read of a
    config object's field (``TSF203``) is either fixed or refused with the reason, which
    ``tsfix check`` shows instead of promising a fix. Reads that are not configuration
    (``self.training``, submodules, tensors, values of unknown type) are noted with ``-v`` only.
    The parameter type is the one type that serves the values ``__init__`` gives and every use in
    the compiled methods (an attribute's value must have the argument's type exactly: an int
    attribute fails to script as ``Optional[float]`` or ``Optional[bool]``). The values: an
    annotation, a literal or literal default, ``int(...)``, ``len(...)`` (of a submodule list:
    structure, never lifted), arithmetic of those, else
    (a constructor parameter with neither) the type every observed example build passed when
    the example runs were observed (``annotate`` in the same run asks for them). The uses:
    ``range(n)`` and slices need an int, an index an int (or a str key), ``<`` and arithmetic a
    number, ``== "avg"`` a str, and a literal compared or combined with it (``n > 0.5``,
    ``i < n - 1``) tells int from float; a bare truth test takes any type (measured: an
    ``Optional[int]``, ``float`` or ``str`` argument serves ``if n:``, ``not n``, ``and``,
    ``while``, ternaries) and alone means bool. Refused, with the use named: a type no use
    allows (a float in ``range()``, a bool index), and a number of unknown type used only in
    arithmetic with tensors (int or float cannot be told; annotating the constructor parameter
    settles it). A wrong guess fails re-script, and validation rejects the rewrite rather than
    writing it.
    Config objects are followed down to the field read: ``self.config.NETWORK.USE_X`` is copied
    as ``self.USE_X = self.config.NETWORK.USE_X``, and a node of one kept on the module
    (``self.NETWORK = self.config.NETWORK``, YACS style, whose fields the class reads) is a config
    object too, its fields copied after it; such an object, or any attribute whose fields are
    read, is never lifted itself.
"""

from __future__ import annotations

import ast
from typing import Any, ClassVar

import libcst as cst
from tsfix.codemods.facts.module import module_facts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import self_name
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule
from tsfix.codemods.rules.imports import add_module_import
from tsfix.codemods.rules.lift_branch._callees import Callees
from tsfix.codemods.rules.lift_branch._export import export_method
from tsfix.codemods.rules.lift_branch._export import settle as settle_export
from tsfix.codemods.rules.lift_branch._plan import ClassAnalysis, Plan
from tsfix.codemods.rules.lift_branch._reads import describe
from tsfix.codemods.rules.lift_branch._rewrite import (
    copy_config_fields,
    reads_replaced,
    with_parameters,
)

# The parts, in the order a class goes through them: _setup.py (what __init__ sets up: structural
# reads, config holders, objects; _callees.py looks up constructors defined in other files),
# _reads.py (the reads in compiled methods), _usage.py (what each use needs of the value),
# _values.py (the type of a value __init__ gives), _decide.py (lift or refuse, and why), _plan.py
# (ClassAnalysis and the plan it makes), _rewrite.py (applying it), _onnx.py and _export.py (the
# --target onnx and --target export forms).


class LiftBranch(Rule):
    __doc__ = __doc__
    name = "lift-branch"
    order = 70
    CODES = (
        Code("TSF203", "config-object", "field of a config object read in a compiled method",
             "A ScriptModule cannot hold a config object (dataclass, namespace, dict); copy the "
             "fields forward reads into plain attributes in __init__."),
        Code("TSF204", "config-branch", "branch on a configuration attribute",
             "Scripts, but torch.jit.freeze, Final attributes, the ONNX exporter and torch.export "
             "bake the attribute: the exported model keeps only the branch chosen at "
             "construction. Lifting it into a forward() argument keeps every branch.",
             level="warning"),
    )
    summary = ("Config-attribute branches in forward() become a typed forward() argument, so one "
               "scripted or exported artifact keeps every path.")

    VALID = (
        # self.training is not configuration.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.1)
    def forward(self, x):
        if self.training:
            x = self.drop(x)
        return x
""",
        # A structural flag decides which submodule exists.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, use_proj=True):
        super().__init__()
        self.use_proj = use_proj
        if use_proj:
            self.proj = nn.Linear(4, 4)
    def forward(self, x):
        if self.use_proj:
            x = self.proj(x)
        return x
""",
        # State mutated outside __init__.
        """
import torch.nn as nn
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.warm = True
    def forward(self, x):
        if self.warm:
            self.warm = False
        return x
""",
    )
    INVALID = (
        Example(
            """
import torch.nn as nn
class M(nn.Module):
    def __init__(self, use_act=True):
        super().__init__()
        self.use_act = use_act
    def forward(self, x):
        if self.use_act == True:
            x = x.relu()
        return x
""",
            """
from typing import Optional

import torch.nn as nn
class M(nn.Module):
    def __init__(self, use_act=True):
        super().__init__()
        self.use_act = use_act
    def forward(self, x, use_act: Optional[bool] = None):
        if use_act is None:
            use_act = self.use_act
        if use_act == True:
            x = x.relu()
        return x
""",
        ),
        Example(
            """
from typing import Optional
import torch.nn as nn
class Pool(nn.Module):
    def __init__(self, mode: str = "avg"):
        super().__init__()
        self.mode = mode
    def forward(self, x, mode=None):
        \"\"\"Pool over time.\"\"\"
        return self._pool(x)
    def _pool(self, x):
        return x.mean(1) if self.mode == "avg" else x.amax(1)
""",
            """
from typing import Optional
import torch.nn as nn
class Pool(nn.Module):
    def __init__(self, mode: str = "avg"):
        super().__init__()
        self.mode = mode
    def forward(self, x, mode=None, mode_value: Optional[str] = None):
        \"\"\"Pool over time.\"\"\"
        if mode_value is None:
            mode_value = self.mode
        return self._pool(x, mode_value=mode_value)
    def _pool(self, x, mode_value: Optional[str] = None):
        if mode_value is None:
            mode_value = self.mode
        return x.mean(1) if mode_value == "avg" else x.amax(1)
""",
        ),
        Example(
            """
import torch.nn as nn
class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        y = self.fc(x) * self.cfg.scale
        if self.cfg["residual"]:
            y = y + x
        return y
""",
            """
from typing import Optional

import torch.nn as nn
class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.scale = self.cfg.scale
        self.residual = self.cfg["residual"]
        self.fc = nn.Linear(4, 4)
    def forward(self, x, residual: Optional[bool] = None):
        if residual is None:
            residual = self.residual
        y = self.fc(x) * self.scale
        if residual:
            y = y + x
        return y
""",
        ),
    )

    # "onnx": the form the TorchScript-based ONNX exporter keeps every branch of (LiftBranchOnnx).
    target: ClassVar[str] = "torchscript"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.callees = Callees(self)

    @property
    def tensor_name(self) -> str | None:
        """--target onnx: how the file names torch.Tensor (``torch`` is imported when the file
        cannot name it). None for the TorchScript form."""
        return self.facts.tensor_name if self.target == "onnx" else None

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        """Something lift-branch looks at: a test in a compiled method that reads an attribute
        of self, or a compiled read of a field of an attribute (``self.cfg.x``,
        ``self.cfg["x"]``) that ``__init__`` does not set to a torch object."""
        for klass, func in file.compiled:
            self_var = file.self_var(func)
            if any(file.reads_self(test, self_var) for test in file.tests(func)):
                return True
            holders = {node.value.attr for node in file.nodes_of(func)
                       if isinstance(node, ast.Attribute | ast.Subscript)
                       and isinstance(node.value, ast.Attribute)
                       and isinstance(node.value.value, ast.Name)
                       and node.value.value.id == self_var}
            if holders and _init_may_store_config(file, klass, holders):
                return True
        return False

    def transform_module_impl(self, tree: cst.Module) -> cst.Module:
        # The file's facts before the rewrite: can it name torch.Tensor already?
        facts = module_facts(tree)
        import_torch = facts.torch_alias is None and (
            self.target == "export" or (self.target == "onnx"
                                        and facts.imports.get("Tensor") != "torch.Tensor"))
        rewritten = super().transform_module_impl(tree)
        if self.changes and import_torch:
            rewritten = add_module_import(rewritten, "torch")
        return rewritten

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        name = cls.name.value
        if not self.facts.is_module_class(cls):
            return cls
        analysis = ClassAnalysis(self, cls, self.callees, self.target)
        plan = analysis.plan()
        if plan is not None:
            plan = self.settle(analysis, plan)
        if plan is None:
            return cls
        rewritten = self._apply(analysis, plan, cls)
        for node, code, message in analysis.fixes:
            self.fixed(node, code, message)
        if plan.lifts:
            self.need_typing("Optional")
        parts = [f"lifted {describe(lift.key)} as {lift.param}: Optional[{lift.type}]"
                 for lift in plan.lifts] if self.target == "torchscript" else [
            f"lifted {describe(lift.key)} as {lift.param}: Optional[Tensor] "
            f"({'int code' if lift.codes is not None else lift.type})"
            for lift in plan.lifts] if self.target == "export" else [
            f"lifted {describe(lift.key)} as {lift.param}: Optional[Tensor] "
            f"({'int code' if lift.codes is not None else lift.type} {lift.local})"
            for lift in plan.lifts]
        parts += [f"copied {describe(c.key)} to self.{c.attr}" for c in plan.copies
                  if c.key not in {lift.key for lift in plan.lifts}]
        # Validation calls forward() with each configuration's values of these parameters.
        lifted = {lift.param: lift.attr for lift in plan.lifts if "forward" in lift.methods}
        self.changes.append(ClassChange(self.name, name, self.span_of(cls), "; ".join(parts),
                                        lifted))
        return rewritten

    def settle(self, analysis: ClassAnalysis, plan: Plan) -> Plan | None:
        """The plan this form applies (a target form may refuse some lifts)."""
        return plan

    def _apply(self, analysis: ClassAnalysis, plan: Plan,
               cls: cst.ClassDef) -> cst.ClassDef:
        assert isinstance(cls.body, cst.IndentedBlock)
        new_body: list[cst.BaseStatement] = []
        for statement in cls.body.body:
            if isinstance(statement, cst.FunctionDef):
                name = statement.name.value
                self_var = self_name(statement) or "self"
                if name in plan.reachable:
                    statement = self._rewrite_method(analysis, plan, statement, self_var)
                if name == "__init__":
                    statement = copy_config_fields(plan, statement, self_var)
            new_body.append(statement)
        return cls.with_changes(body=cls.body.with_changes(body=new_body))

    def _rewrite_method(self, analysis: ClassAnalysis, plan: Plan, func: cst.FunctionDef,
                        self_var: str) -> cst.FunctionDef:
        func, mine = reads_replaced(analysis.reads, plan, func, self_var)
        return with_parameters(func, mine, self_var, self.tensor_name) if mine else func


class LiftBranchOnnx(LiftBranch):
    """``lift-branch`` under ``--target onnx``: each lifted setting is an ``Optional[Tensor]``
    argument, read into a plain local::

        def forward(self, x, use_act: Optional[Tensor] = None):
            use_act_value: bool = self.use_act
            if use_act is not None:
                use_act_value = bool(use_act)
            if use_act_value:
                ...

    A str setting compared only with string literals becomes an int code (``mode == "avg"`` ->
    ``mode_value == 0``, any other string -1); other str settings are not lifted.

    Why this form (measured, torch 2.13 / onnx 1.23 / onnxruntime 1.31, TorchScript-based
    exporter): an ``Optional[bool]``/``Optional[int]``/``Optional[float]`` input is exported
    without a type and onnxruntime refuses the model; a ``str`` input cannot be exported; an
    ``Optional[Tensor]`` input exports as ``optional(tensor)``, every branch on it stays an
    ``If`` (a ``while`` on it a ``Loop``), and onnxruntime matches eager for every value. A plain
    ``bool`` argument would also export, but only without a default, which breaks existing
    ``model(x)`` callers or needs a wrapper class in the user's file. Here existing callers are
    unchanged (the setting is read from the attribute), and the rewritten class exports as it
    is: ``torch.onnx.export(torch.jit.script(m), (x, torch.tensor(True)), f, dynamo=False)``.
    A float setting is given as a float64 scalar tensor (a Python float is a double there).
    """

    target = "onnx"


class LiftBranchExport(LiftBranch):
    """``lift-branch`` under ``--target export``: each lifted setting is an
    ``Optional[torch.Tensor]`` argument holding the setting as a 0-d tensor, and each branch
    on it is a ``torch.cond``::

        def forward(self, x, branch_testing: Optional[torch.Tensor] = None):
            if branch_testing is None:
                branch_testing = torch.tensor(self.branch_testing)
            def branch_testing_true(x):
                x = self.act(x)
                return x
            def branch_testing_false(x):
                return x.clone()
            x = torch.cond(branch_testing == True, branch_testing_true,
                           branch_testing_false, (x,))
            return x

    Why this form (measured, torch 2.13): ``torch.export`` specialises a module attribute and a
    Python scalar argument, so the exported program (and the ``dynamo=True`` ONNX file) keeps
    only the branch taken while tracing; a Python ``if`` on a tensor fails to export. A 0-d
    tensor argument and ``torch.cond`` keep both branches: one exported program serves every
    configuration (``ep.module()(x, branch_testing=torch.tensor(False))``), survives
    ``torch.export.save``/``load``, and its ONNX export holds one ``If`` per ``cond``. Existing
    callers are unchanged (None reads the attribute). The branch functions take the locals the
    branch reads and return those code after it reads (``codemods/rules/torch_cond.py``); an
    unchanged value is returned as ``x.clone()`` because torch.cond rejects an output that
    aliases an input.

    A setting is lifted only when every read of it in the compiled methods can take the tensor:
    ``if`` tests that lower to ``torch.cond`` (``not flag`` becomes ``torch.logical_not(flag)``,
    ``a and b`` ``torch.logical_and(a, b)``) and tensor arithmetic (``x * scale``). A read in a
    ``while`` test, ``range(...)``, an index or slice, a ternary, or a test mixing it with
    Python values, and a branch torch.cond cannot express (a side that returns, raises or
    mutates state, or that assigns no tensor), refuses the setting with the reason. A str
    setting compared only with string literals becomes an int code, as under ``--target
    onnx``.
    """

    target = "export"

    @property
    def torch_name(self) -> str:
        return self.facts.torch_alias or "torch"

    def settle(self, analysis: ClassAnalysis, plan: Plan) -> Plan | None:
        return settle_export(self, analysis, plan, self.torch_name)

    def _rewrite_method(self, analysis: ClassAnalysis, plan: Plan, func: cst.FunctionDef,
                        self_var: str) -> cst.FunctionDef:
        rewritten, problems = export_method(analysis, plan, func, self_var, self.torch_name)
        assert not problems, problems
        return rewritten


LiftBranch.target_forms = {"onnx": LiftBranchOnnx, "export": LiftBranchExport}


def _init_may_store_config(file: AstFile, klass: ast.ClassDef, holders: set[str]) -> bool:
    """Whether ``__init__`` may store something other than a torch object in one of
    ``holders`` (a config object, dict, namespace, or a value of unknown kind)."""
    init = file.init_of(klass)
    if init is None:
        return False
    self_var = file.self_var(init)
    for node in ast.walk(init):
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign | ast.AugAssign) else [])
        for target in targets:
            for item in ast.walk(target):
                if (isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name)
                        and item.value.id == self_var and item.attr in holders):
                    value = getattr(node, "value", None)
                    if not (isinstance(value, ast.Call)
                            and file.resolved(value.func).split(".")[0] == "torch"):
                        return True
    return False
