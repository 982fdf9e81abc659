"""``foreign-class``: a module constructed in compiled code is built once in ``__init__``, or
called from a ``@torch.jit.ignore`` method.

What it does
    In compiled methods (``forward()``, ``@torch.jit.export`` methods and the methods they
    call), a module class constructed where it runs::

        return julius.ResampleFrac(self.old_sr, self.new_sr)(x)

    is a site when the class is an ``nn.Module`` of this file (any use of the new object), or
    a class named in CapWords from an import (another package, ``torch.nn``) whose new object
    is called at once, ``Cls(...)(...)``, or bound to a name that the method calls: the uses
    that make it a module.

    * When every constructor argument is a constant of the instance -- a literal, arithmetic
      and tuples of literals, or ``self.<attr>`` that only ``__init__`` assigns -- the object
      is built at the end of ``__init__`` as ``self._<class_name> = Cls(...)`` (the arguments
      as written) and the construction becomes ``self._<class_name>``. Constructions written
      alike share one attribute. When the class may have buffers (a class of another
      package, or one of this file that registers any), they are made non-persistent right
      after, so ``state_dict`` keeps exactly its keys.
    * Otherwise, when the new object is called at once, the whole call moves into a method
      decorated ``@torch.jit.ignore``, placed after the method it came from, taking the
      method's locals it reads, annotated with their types (from the code, or the example
      runs), returning a Tensor::

          y = self._resample_frac(sr, x)   # was: julius.ResampleFrac(sr, 5)(x)

    Not sites: an autograd ``Function`` called old-style (``RoIAlignFunction(...)(x)``, a
    name ending in ``Function`` or a class of the file derived from one), which is no module.
    Left alone, with the reason: a non-constant argument of an object that is not called at
    once, ``*args``/``**kwargs`` in the construction, a class without its own ``__init__``
    or one that returns early, a local whose type is not known, and a file without
    ``import torch`` for the decorator.

Why it breaks export
    TorchScript cannot construct an ``nn.Module`` in compiled code: "Cannot instantiate class
    'ResampleFrac' in a script function" (torch 2.13; the same for a module of the file and
    for ``torch.nn``'s). A submodule built in ``__init__`` is compiled with the model (when
    its own code scripts) and the artifact saves. A ``@torch.jit.ignore`` method is left to
    Python: the model scripts and gives the same outputs, but the artifact is **Python-only**:
    ``torch.jit.save`` fails on it ("Could not export Python function call"), and so does
    ONNX export. A plain (non-Module) class of the file is compiled as a TorchScript class
    and needs neither.

Example
    Before::

        def __init__(self, old_sr=4, new_sr=5):
            super().__init__()
            self.old_sr = old_sr
            self.new_sr = new_sr

        def forward(self, x):
            return julius.ResampleFrac(self.old_sr, self.new_sr)(x)

    After::

        def __init__(self, old_sr=4, new_sr=5):
            super().__init__()
            self.old_sr = old_sr
            self.new_sr = new_sr
            self._resample_frac = julius.ResampleFrac(self.old_sr, self.new_sr)
            for _module in self._resample_frac.modules():
                for _name, _buffer in list(_module.named_buffers(recurse=False)):
                    _module.register_buffer(_name, _buffer, persistent=False)

        def forward(self, x):
            return self._resample_frac(x)

Fix safety
    Built in ``__init__``, the object is made once instead of at every call: the same
    outputs when building it has no effect but the object (validation runs several calls and
    compares). Differences it can make, which validation catches where the examples reach
    them: random initial weights drawn once (their parameters also join ``state_dict``, whose
    keys validation requires unchanged, so a class with parameters is rejected), state the
    object keeps between calls, the model's train/eval mode and device now followed by the
    object (built per call it was always in training mode, on the default device), and a
    setting changed on the instance after construction no longer seen. The ignored method
    runs the same expression on the same values: eager behaviour is unchanged; under
    ``torch.jit.script`` the values cross the call converted to the annotated types, and the
    artifact runs from Python only (every such class carries a note, and validation expects
    ``torch.jit.save`` to fail), as ``ignore-numpy``'s.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.module import ModuleFacts
from tsfix.codemods.facts.prefilter import AstFile
from tsfix.codemods.facts.syntax import (
    ReplaceById,
    code_of,
    find_all,
    fresh_name,
    names_bound_in,
    names_used,
    parameters_of,
    parent_map,
    qualified_name,
    self_attr,
    self_name,
    short_source,
)
from tsfix.codemods.facts.value_types import TENSOR
from tsfix.codemods.rules.base import ClassChange, Code, Example, Rule

CODE = "TSF248"
PYTHON_ONLY_NOTE = (
    "python only: {methods} {verb} @torch.jit.ignore; the scripted artifact runs from Python "
    "but cannot be saved with torch.jit.save nor exported to ONNX (build the object in "
    "__init__ from constant arguments for an artifact that saves)")
# torch.nn names in CapWords that are not modules: constructing them in forward scripts or
# fails for another reason.
_NOT_MODULES = frozenset({"Parameter", "Buffer", "UninitializedParameter",
                          "UninitializedBuffer", "ParameterList", "ParameterDict"})
_SIMPLE_TYPES = ("int", "float", "bool", "str")


class _Refused(Exception):
    """Why a construction stays where it is."""


@dataclass
class _Site:
    method: str
    func: cst.FunctionDef
    call: cst.Call              # the construction
    called: cst.Call | None     # ``Cls(...)(...)``: the construction called at once
    class_name: str             # as written, last part (``ResampleFrac``)
    local: cst.ClassDef | None  # the class, when this file defines it
    qualified: str = ""         # its dotted name through the imports, when imported


class ForeignClass(Rule):
    __doc__ = __doc__
    name = "foreign-class"
    # After the rules that rewrite forward's expressions (einops-to-torch 35, dtype-methods
    # 42): a construction they leave in place is moved as it then reads; before ignore-numpy
    # (90) and annotate (100), which then see the new @torch.jit.ignore method as ignored.
    order = 86
    targets = ("torchscript", "onnx")
    off_target = "torch.export runs the Python as written: a module built in forward exports"
    CODES = (
        Code(CODE, "foreign-class", "module constructed in compiled code",
             "TorchScript cannot construct an nn.Module in compiled code (\"Cannot instantiate "
             "class 'ResampleFrac' in a script function\"). Build it once in __init__ "
             "(`self._resample = ResampleFrac(4, 5)`) and call `self._resample(x)`, or call it "
             "from a @torch.jit.ignore method (a Python-only artifact); `tsfix apply --rule "
             "foreign-class` does."),
    )
    summary = ("A module constructed in compiled code is built once in __init__ from constant "
               "arguments, else called from a @torch.jit.ignore method (Python-only)")

    VALID = (
        # A plain class of the file: TorchScript compiles it as a TorchScript class.
        """
import torch
class Scale:
    def __init__(self, k: float):
        self.k = k
    def apply(self, x):
        return x * self.k
class M(torch.nn.Module):
    def forward(self, x):
        return Scale(2.0).apply(x)
""",
    )
    INVALID = (
        Example(
            """
import torch
import julius
class Resample(torch.nn.Module):
    def __init__(self, old_sr=4, new_sr=5):
        super().__init__()
        self.old_sr = old_sr
        self.new_sr = new_sr
    def forward(self, x):
        return julius.ResampleFrac(self.old_sr, self.new_sr)(x)
""",
            """
import torch
import julius
class Resample(torch.nn.Module):
    def __init__(self, old_sr=4, new_sr=5):
        super().__init__()
        self.old_sr = old_sr
        self.new_sr = new_sr
        self._resample_frac = julius.ResampleFrac(self.old_sr, self.new_sr)
        for _module in self._resample_frac.modules():
            for _name, _buffer in list(_module.named_buffers(recurse=False)):
                _module.register_buffer(_name, _buffer, persistent=False)
    def forward(self, x):
        return self._resample_frac(x)
""",
        ),
        Example(
            """
import torch
import julius
class Resample(torch.nn.Module):
    def forward(self, x, sr: int):
        return julius.ResampleFrac(sr, 5)(x)
""",
            '''
import torch
import julius
class Resample(torch.nn.Module):
    def forward(self, x, sr: int):
        return self._resample_frac(sr, x)

    @torch.jit.ignore
    def _resample_frac(self, sr: int, x: torch.Tensor) -> torch.Tensor:
        """Runs in Python only (torch.jit.ignore): TorchScript cannot construct ResampleFrac."""
        return julius.ResampleFrac(sr, 5)(x)
''',
        ),
        # Not called at once, built from forward's values: left, reported.
        Example(
            """
import torch
class Gain(torch.nn.Module):
    def __init__(self, k: float):
        super().__init__()
        self.k = k
    def forward(self, x):
        return x * self.k
class M(torch.nn.Module):
    def forward(self, x, k: float):
        gain = Gain(k)
        return gain(x)
""",
        ),
    )

    @classmethod
    def may_apply(cls, file: AstFile) -> bool:
        if file.tree is None:
            return True
        return any(isinstance(node, ast.Call) and (
            isinstance(node.func, ast.Call) or _class_like(node.func))
            for node in file.compiled_nodes())

    def rewrite_class(self, cls: cst.ClassDef) -> cst.ClassDef:
        if not self.facts.is_module_class(cls):
            return cls
        facts = self.class_facts(cls)
        sites = self._sites(facts)
        if not sites:
            return cls
        plan = _Plan(self, cls, facts)
        for site in sites:
            if id(site.call) in plan.moved:
                continue        # inside a call an earlier site moved into an ignored method
            message = (f"{site.method}(): `{short_source(site.call)}` constructs "
                       f"{site.class_name} in compiled code")
            try:
                plan.add(site)
            except _Refused as why:
                self.skip(facts.name, site.call, f"{message}; left as it is: {why}",
                          code=CODE, message=message)
                continue
            self.fixed(site.call, CODE, message)
        if not plan.parts:
            return cls
        rewritten = plan.apply()
        notes = []
        if plan.ignored:
            names = [f"{m}()" for m in plan.ignored]
            notes.append(PYTHON_ONLY_NOTE.format(methods=", ".join(names),
                                                 verb="is" if len(names) == 1 else "are"))
        self.changes.append(ClassChange(self.name, cls.name.value, self.span_of(cls),
                                        "; ".join(plan.parts), notes=notes,
                                        python_only=bool(plan.ignored)))
        return rewritten

    def _sites(self, facts: ClassFacts) -> list[_Site]:
        found: list[_Site] = []
        for method, func in facts.compiled_methods():
            parents = parent_map(func)
            for call in find_all(func.body, cst.Call):
                if not facts.is_compiled(method, call):
                    continue
                site = self._site(method, func, call, parents)
                if site is not None:
                    found.append(site)
        return found

    def _site(self, method: str, func: cst.FunctionDef, call: cst.Call,
              parents: Mapping[int, cst.CSTNode]) -> _Site | None:
        dotted = get_full_name_for_node(call.func)
        if dotted is None or not isinstance(call.func, cst.Name | cst.Attribute):
            return None
        last = dotted.rsplit(".", 1)[-1]
        if not (last[:1].isupper() and any(c.islower() for c in last)):
            return None
        if last.endswith("Function") or _autograd_function(self.facts, dotted):
            # An autograd Function called old-style (RoIAlignFunction(...)(x), 43 sites in
            # ParityBench): not a module, and torch 2.13 refuses the call eagerly too.
            return None
        parent = parents.get(id(call))
        called = parent if isinstance(parent, cst.Call) and parent.func is call else None
        used_as_module = called is not None or _bound_and_called(func, call, parent)
        local = self.facts.classes.get(dotted)
        if local is not None:
            if not self.facts.is_module_class(local) or dotted in names_bound_in(func):
                return None
            return _Site(method, func, call, called, last, local)
        head = dotted.split(".")[0]
        qualified = qualified_name(call.func, self.facts.imports) or dotted
        if (not used_as_module or head not in self.facts.imports
                or head in names_bound_in(func)):
            return None
        if qualified.startswith("torch.") and (not qualified.startswith("torch.nn.")
                                               or last in _NOT_MODULES):
            return None
        if qualified.startswith(("typing.", "collections.", "dataclasses.")):
            return None
        return _Site(method, func, call, called, last, None, qualified)


class _Plan:
    """The rewrite of one class: replacements in its compiled methods, statements added at the
    end of ``__init__``, and ``@torch.jit.ignore`` methods added after their callers."""

    def __init__(self, rule: ForeignClass, cls: cst.ClassDef, facts: ClassFacts) -> None:
        self.rule = rule
        self.cls = cls
        self.facts = facts
        self.replacements: dict[int, cst.CSTNode] = {}
        self.init_lines: list[str] = []
        self.built: dict[str, str] = {}                 # construction as written -> attribute
        self.methods: dict[str, list[str]] = {}         # caller -> ignored methods' source
        self.ignored: list[str] = []
        self.moved: set[int] = set()                    # nodes moved into ignored methods
        self.parts: list[str] = []
        self.taken = (names_used(cls) | set(facts.methods)
                      | {a.attr.value for a in find_all(cls, cst.Attribute)})
        self.init_attrs = {a.attr for a in facts.assignments if a.method == "__init__"}

    def add(self, site: _Site) -> None:
        self_var = self_name(site.func)
        if self_var is None:
            raise _Refused(f"{site.method}() has no self parameter")
        if any(arg.star for arg in site.call.args):
            raise _Refused("the construction passes *args or **kwargs")
        # A word starts at a capital followed by a lower-case letter: ResampleFrac is
        # resample_frac, BCEWithLogitsLoss bce_with_logits_loss, ReLU relu.
        wanted = "_" + re.sub(r"(?<=[A-Za-z0-9])(?=[A-Z][a-z])", "_",
                              site.class_name).lower()
        why_not = self._not_constant(site.call, self_var)
        if why_not is None:
            self._build_in_init(site, self_var, wanted)
        elif site.called is not None:
            self._ignore(site, self_var, wanted, why_not)
        else:
            raise _Refused(f"{why_not}, and the new object is not called at once "
                           f"(`{site.class_name}(...)(...)`) for a @torch.jit.ignore method "
                           "to call it")

    def _not_constant(self, call: cst.Call, self_var: str) -> str | None:
        for arg in call.args:
            bad = self._non_constant_part(arg.value, self_var)
            if bad is not None:
                return f"`{short_source(bad)}` is not a constant of the instance"
        return None

    def _non_constant_part(self, expr: cst.BaseExpression, self_var: str
                           ) -> cst.BaseExpression | None:
        if isinstance(expr, cst.Integer | cst.Float | cst.Imaginary | cst.SimpleString
                      | cst.ConcatenatedString):
            return None
        if isinstance(expr, cst.Name):
            return None if expr.value in ("True", "False", "None") else expr
        if isinstance(expr, cst.UnaryOperation):
            return self._non_constant_part(expr.expression, self_var)
        if isinstance(expr, cst.BinaryOperation):
            return (self._non_constant_part(expr.left, self_var)
                    or self._non_constant_part(expr.right, self_var))
        if isinstance(expr, cst.Tuple | cst.List):
            for element in expr.elements:
                if isinstance(element, cst.StarredElement):
                    return expr
                bad = self._non_constant_part(element.value, self_var)
                if bad is not None:
                    return bad
            return None
        if (isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name)
                and expr.value.value == self_var):
            attr = expr.attr.value
            # A submodule given to the new module would be its submodule too: state_dict
            # would list its weights twice.
            if (attr in self.init_attrs and attr not in self.facts.assigned_outside_init
                    and attr not in self.facts.submodules):
                return None
        return expr

    def _build_in_init(self, site: _Site, self_var: str, wanted: str) -> None:
        init = self.facts.init
        if init is None or not isinstance(init.body, cst.IndentedBlock):
            raise _Refused("the class has no __init__ of its own to build it in")
        if find_all(init.body, cst.Return):
            raise _Refused("__init__ returns early: the end of __init__ may not run")
        init_self = self_name(init)
        if init_self != self_var:
            raise _Refused(f"__init__ names self `{init_self}`, {site.method}() `{self_var}`")
        construction = code_of(site.call)
        attr = self.built.get(construction)
        if attr is None:
            attr = fresh_name(wanted, taken=self.taken, numbered=f"{wanted}_")
            self.taken.add(attr)
            self.built[construction] = attr
            self.init_lines.append(f"{self_var}.{attr} = {construction}\n")
            if self._may_have_buffers(site):
                names = [fresh_name(n, taken=self.taken | names_used(init))
                         for n in ("_module", "_name", "_buffer")]
                self.init_lines.append(
                    f"for {names[0]} in {self_var}.{attr}.modules():\n"
                    f"    for {names[1]}, {names[2]} in list({names[0]}.named_buffers("
                    "recurse=False)):\n"
                    f"        {names[0]}.register_buffer({names[1]}, {names[2]}, "
                    "persistent=False)\n")
            self.parts.append(f"{site.method}(): {site.class_name} built once in __init__ as "
                              f"self.{attr}")
        self.replacements[id(site.call)] = cst.parse_expression(f"{self_var}.{attr}")

    def _may_have_buffers(self, site: _Site) -> bool:
        if site.local is None:
            # torch.nn's modules with buffers (norms' running statistics) have parameters
            # too, which state_dict would gain anyway: validation rejects those.
            return not site.qualified.startswith("torch.nn.")
        classes = [site.local, *self.rule.facts.local_bases(site.local)]
        if any(not base.startswith("torch.nn") and base not in self.rule.facts.classes
               for c in classes for base in self.rule.facts.bases(c)):
            return True
        return any("register_buffer" in code_of(c) for c in classes)

    def _ignore(self, site: _Site, self_var: str, wanted: str, why_not: str) -> None:
        assert site.called is not None
        torch = self.rule.facts.torch_alias
        if torch is None:
            raise _Refused(f"{why_not}, and the file does not import torch (`import torch`), "
                           "which the @torch.jit.ignore decorator needs")
        if find_all(site.called, cst.Lambda, cst.ListComp, cst.GeneratorExp, cst.DictComp,
                    cst.SetComp, cst.NamedExpr, cst.Await, cst.Yield):
            raise _Refused(f"{why_not}, and the call binds names of its own")
        for inner in find_all(site.called, cst.Call):
            # Measured on torch 2.13 (as ignore-numpy found): from an ignored method, a submodule of
            # the scripted module is not callable, and methods it did not compile are absent.
            callee = self_attr(inner.func, self_var)
            if callee is not None:
                raise _Refused(f"{why_not}, and the call calls `{self_var}.{callee}(...)`, "
                               "which a @torch.jit.ignore method cannot call on the scripted "
                               "module")
        bound = names_bound_in(site.func) | set(parameters_of(site.func))
        inputs: list[str] = []
        for name in _reads(site.called):
            if name in bound and name != self_var and name not in inputs:
                inputs.append(name)
        typer = self.facts.typer(site.method, self.rule.observed.get(self.facts.name, {})
                                 .get(site.method))
        params = parameters_of(site.func)
        annotated = []
        for name in inputs:
            kind = typer.env.get(name)
            param = params.get(name)
            if (kind is None and param is not None and param.annotation is None
                    and param.default is None and param.star == ""):
                kind = TENSOR       # an unannotated parameter without default is a Tensor
            spelled = self._spelled(kind)
            if spelled is None:
                raise _Refused(f"{why_not}, and the type of `{name}` is not known for the "
                               "@torch.jit.ignore method's parameter")
            annotated.append(f"{name}: {spelled}")
        method = fresh_name(wanted, taken=self.taken, numbered=f"{wanted}_")
        self.taken.add(method)
        tensor = self.rule.facts.tensor_name
        self.methods.setdefault(site.method, []).append(
            f"@{torch}.jit.ignore\n"
            f"def {method}({', '.join([self_var, *annotated])}) -> {tensor}:\n"
            f'    """Runs in Python only (torch.jit.ignore): TorchScript cannot construct '
            f'{site.class_name}."""\n'
            f"    return {code_of(site.called)}\n")
        self.replacements[id(site.called)] = cst.parse_expression(
            f"{self_var}.{method}({', '.join(inputs)})")
        self.ignored.append(method)
        self.moved.update(id(n) for n in find_all(site.called, cst.Call))
        self.parts.append(f"{site.method}(): the {site.class_name} call moved into the "
                          f"@torch.jit.ignore method {method}() ({why_not})")

    def _spelled(self, kind: str | None) -> str | None:
        if kind is None or "?" in kind:
            return None
        words = set(re.findall(r"[A-Za-z_]\w*", kind))
        typing = words & {"List", "Tuple", "Dict", "Optional"}
        if words - typing - {TENSOR, *_SIMPLE_TYPES}:
            return None
        self.rule.need_typing(*typing)
        return re.sub(rf"\b{TENSOR}\b", self.rule.facts.tensor_name, kind)

    def apply(self) -> cst.ClassDef:
        init = self.facts.init
        if self.init_lines and init is not None:
            assert isinstance(init.body, cst.IndentedBlock)
            added = cst.parse_module("".join(self.init_lines)).body
            self.replacements[id(init.body)] = init.body.with_changes(
                body=[*init.body.body, *added])
        rewritten = self.cls.visit(ReplaceById(self.replacements))
        assert isinstance(rewritten, cst.ClassDef) and isinstance(rewritten.body,
                                                                  cst.IndentedBlock)
        body: list[cst.BaseStatement] = []
        for statement in rewritten.body.body:
            body.append(statement)
            if isinstance(statement, cst.FunctionDef):
                for source in self.methods.pop(statement.name.value, []):
                    added_method = cst.parse_statement(source)
                    assert isinstance(added_method, cst.FunctionDef)
                    body.append(added_method.with_changes(
                        leading_lines=[cst.EmptyLine(indent=False)]))
        return rewritten.with_changes(body=rewritten.body.with_changes(body=body))


def _autograd_function(facts: ModuleFacts, name: str) -> bool:
    """A class of the file derived from ``torch.autograd.Function``."""
    local = facts.classes.get(name)
    if local is None:
        return False
    return any(base.endswith("autograd.Function") or base == "Function"
               for c in (local, *facts.local_bases(local)) for base in facts.bases(c))


def _class_like(func: ast.expr) -> bool:
    """A name or attribute in CapWords: what the rule's sites call (the prefilter's view)."""
    name = (func.id if isinstance(func, ast.Name)
            else func.attr if isinstance(func, ast.Attribute) else "")
    return name[:1].isupper() and any(c.islower() for c in name)


def _bound_and_called(func: cst.FunctionDef, call: cst.Call, parent: cst.CSTNode | None
                      ) -> bool:
    """``name = Cls(...)`` and ``name(...)`` in the method: the object is used as a module."""
    if not (isinstance(parent, cst.Assign) and parent.value is call and len(parent.targets) == 1
            and isinstance(parent.targets[0].target, cst.Name)):
        return False
    name = parent.targets[0].target.value
    return any(isinstance(c.func, cst.Name) and c.func.value == name
               for c in find_all(func.body, cst.Call))


def _reads(node: cst.CSTNode) -> list[str]:
    """The names ``node`` reads, in order, not ``.attr`` names nor keyword names."""
    skipped = {id(a.attr) for a in find_all(node, cst.Attribute)}
    skipped |= {id(a.keyword) for a in find_all(node, cst.Arg) if a.keyword is not None}
    return [n.value for n in find_all(node, cst.Name) if id(n) not in skipped]
