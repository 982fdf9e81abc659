"""What one method's translation carries: the units it walks, their outcomes, the types the code
already states, and how the file spells torch and math."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.module import ModuleFacts
from tsfix.codemods.facts.numpy_usage import NumpyUse
from tsfix.codemods.facts.syntax import code_of, find_all, parameters_of, self_name
from tsfix.codemods.facts.value_types import TENSOR, Typer, collect_locals
from tsfix.codemods.rules.base import Rule
from tsfix.codemods.rules.numpy_to_torch._values import Expr, Refuse, Val


@dataclass(frozen=True)
class Spelling:
    """How the rewritten file spells the torch and math modules."""

    torch: str
    math: str
    needs_torch_import: bool
    needs_math_import: bool
    name_clash: bool        # an import to add would clash with a top-level name

    @staticmethod
    def of(facts: ModuleFacts) -> Spelling:
        torch = facts.torch_alias
        maths = [local for local, full in facts.imports.items() if full == "math"]
        taken = facts.top_level_names
        return Spelling(torch or "torch", maths[0] if maths else "math", torch is None,
                        not maths, (torch is None and "torch" in taken)
                        or (not maths and "math" in taken))


@dataclass(frozen=True)
class ClassContext:
    """What the translation of each method needs from its class and file."""

    rule: Rule
    name: str                          # of the class
    facts: ClassFacts
    imports: dict[str, str]
    spelling: Spelling
    attributes: dict[str, str]         # self.<attr> -> its type, from __init__
    layers: set[str]                   # submodules whose call returns a Tensor


@dataclass
class Unit:
    """A translatable piece: one small statement, or the test/iterable of a compound one."""

    node: cst.CSTNode                 # the small statement, or the header expression
    owner: cst.CSTNode                # the statement whose line is reported
    kind: str                         # "small" or "header"
    compiled: bool


@dataclass
class Outcome:
    node: cst.CSTNode | None = None   # the unit translated; None: unchanged
    reason: str | None = None         # why it is not translated (None: translated)
    numpyish: bool = False
    names: list[str] = field(default_factory=list)    # numpy names translated, for the summary
    notes: list[str] = field(default_factory=list)


class Translation:
    """The state of one method's translation, shared by its layers (``Promotion`` <
    ``Expressions`` < ``MethodTranslator``): what the method says about types, the units and
    their outcomes, and the unit being translated."""

    def __init__(self, owner: ClassContext, func: cst.FunctionDef,
                 bindings: dict[str, str]) -> None:
        self.owner = owner
        self.rule = owner.rule
        self.func = func
        self.method = func.name.value
        self.bindings = bindings
        self.self_var = self_name(func)
        self.imports = owner.imports
        self.never = owner.facts.never_compiled(self.method)
        self.typer = self._typer()
        self.base_env = dict(self.typer.env)
        self.local_names = set(parameters_of(func)) | {
            n.value for t in find_all(func.body, cst.AssignTarget, cst.For, cst.AugAssign,
                                      cst.AnnAssign)
            for n in find_all(t.target, cst.Name)}
        self.units: dict[int, Unit] = {}
        self.outcomes: dict[int, Outcome] = {}
        self.uses: dict[int, list[NumpyUse]] = {}
        self.refused: dict[int, str] = {}
        self.conflicts: dict[int, str] = {}
        self._lines: dict[int, int] = {}
        # per unit being translated
        self.unit: Unit
        self.env: dict[str, Val] = {}
        self.outcome = Outcome()
        self.use_ids: set[int] = set()
        self.flag_names: set[str] = set()
        self.unit_line = 0

    def _typer(self) -> Typer:
        """A Typer of its own (the translation rewrites its env unit by unit): the parameter
        types by the shared policy, the attributes and layers ``__init__`` stores, the
        locals."""
        observed = self.rule.observed.get(self.owner.name, {}).get(self.method, {})
        env = self.owner.facts.parameter_types(self.method, observed)
        # Local adjustment to the shared policy, which leaves a parameter without annotation,
        # observed type or default unknown unless the body uses it as a Tensor (so that
        # annotate never types a list into a Tensor). Here the question is what the compiled
        # code computes, and TorchScript itself types such a parameter as a Tensor: without
        # this, ``x + np.zeros(3).sum()`` (x read nowhere else) would be refused.
        for name, param in parameters_of(self.func).items():
            if (env.get(name, TENSOR) is None and param.annotation is None
                    and param.default is None):
                env[name] = TENSOR
        typer = Typer(env, self.imports, self.self_var, self.owner.attributes,
                      self.owner.layers)
        collect_locals(self.func.body, typer)
        return typer

    def _line(self, node: cst.CSTNode) -> int:
        key = id(node)
        if key not in self._lines:
            self._lines[key] = self.rule.line_of(node)
        return self._lines[key]

    def _compiled(self, node: cst.CSTNode) -> bool:
        return id(node) not in self.never

    def expr(self, node: cst.BaseExpression) -> Expr:
        """``node`` translated (the ``Expressions`` layer)."""
        raise NotImplementedError

    def wrap(self, node: cst.BaseExpression, inner: str) -> str:
        return ("".join(code_of(p) for p in node.lpar) + inner
                + "".join(code_of(p) for p in node.rpar))

    def current_line(self) -> int:
        if not self.unit_line:
            self.unit_line = self._line(self.unit.owner)
        return self.unit_line

    def torch_name(self) -> str:
        spelling = self.owner.spelling
        if spelling.torch in self.local_names or (spelling.needs_torch_import
                                                  and spelling.name_clash):
            raise Refuse(f"`{spelling.torch}` is not the torch module here")
        self.outcome.names.append("+torch")
        return spelling.torch

    def math_name(self) -> str:
        spelling = self.owner.spelling
        if spelling.math in self.local_names or (spelling.needs_math_import
                                                 and spelling.name_clash):
            raise Refuse(f"`{spelling.math}` is not the math module here")
        self.outcome.names.append("+math")
        return spelling.math
