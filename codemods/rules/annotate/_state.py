"""What the parts of one method's rewrite share (signature, body, evidence)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cached_property

import libcst as cst
from tsfix.codemods.facts.classes import ClassFacts
from tsfix.codemods.facts.syntax import literal_type, self_name
from tsfix.codemods.facts.value_types import (
    TENSOR,
    Typer,
    annotation_text,
    collect_locals,
    is_complete,
    type_from_annotation,
    typing_names,
)
from tsfix.codemods.rules.annotate._common import Counts, from_observation
from tsfix.codemods.rules.annotate._typer import CalleeTyper, module_functions
from tsfix.codemods.rules.base import Rule


def annotation(rule: Rule, kind: str) -> cst.Annotation:
    """The annotation for ``kind`` as this file spells Tensor; its typing names imported."""
    rule.need_typing(*typing_names(kind))
    text = annotation_text(kind, rule.facts.tensor_name)
    alias = rule.facts.torch_alias
    if alias is not None and alias != "torch":
        # A class of torch (``torch.nn.utils.rnn.PackedSequence``) through the file's name.
        text = re.sub(r"(?<![\w.])torch\.", f"{alias}.", text)
    return cst.Annotation(cst.parse_expression(text))


class FunctionFacts(ClassFacts):
    """The facts of a module-level function, in the shape of a class holding only it: its
    parameters typed by the same policy as a method's (no instance parameter to leave out),
    and no attributes, layers or ``self`` calls."""

    def __init__(self, func: cst.FunctionDef, imports: Mapping[str, str]) -> None:
        super().__init__(cst.ClassDef(name=func.name, body=cst.IndentedBlock(body=[])), imports)
        self.function = func

    @cached_property
    def methods(self) -> dict[str, cst.FunctionDef]:
        return {self.function.name.value: self.function}

    @cached_property
    def compiled(self) -> list[str]:
        return [self.function.name.value]

    def parameter_types(self, method: str, observed: Mapping[str, str] | None = None
                        ) -> dict[str, str | None]:
        observed = observed or {}
        env: dict[str, str | None] = {}
        params = self.function.params
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            name = param.name.value
            if param.annotation is not None:
                env[name] = type_from_annotation(param.annotation.annotation)
            elif is_complete(observed.get(name)):
                env[name] = observed[name]
            elif param.default is not None:
                env[name] = literal_type(param.default)
            else:
                env[name] = TENSOR if self.used_as_tensor(name, self.function) else None
        return env


class MethodState:
    """One compiled method being annotated: what the rewrite has decided so far."""

    def __init__(self, rule: Rule, facts: ClassFacts, counts: Counts,
                 observed: Mapping[str, str], name: str, local_copies: dict[str, str],
                 callee_types: Mapping[str, Mapping[str, str]] | None = None,
                 functions: Mapping[str, cst.FunctionDef] | None = None,
                 function_types: Mapping[str, Mapping[str, str]] | None = None,
                 forward_types: Mapping[str, Mapping[str, str]] | None = None,
                 imported: Mapping[str, tuple[tuple[str, str], ...]] | None = None) -> None:
        self.rule = rule
        self.facts = facts
        self.imports = facts.imports
        self.counts = counts
        self.class_name = facts.name
        self.name = name
        self.func = facts.methods[name]
        # A module-level function has no instance parameter: its first is an ordinary one.
        self.self_var = None if isinstance(facts, FunctionFacts) else self_name(self.func)
        self.observed = observed        # this method's observed types
        self.local_copies = local_copies
        self.prologue: list[str] = []
        self.replacements: dict[int, cst.CSTNode] = {}
        self.asserts: dict[int, list[str]] = {}    # statement id -> asserts to put before it
        self.param_types: dict[str, str] = {}   # what the new signature says
        self.decided: dict[str, str] = {}       # empty literals typed so far
        # method -> the parameter types annotate gave it in this pass (callees go first)
        self.callee_types = callee_types or {}
        # The file's module-level functions as annotate leaves them (their return annotations
        # type a call), and the parameter types it gave those it annotates (callees go first).
        self.functions = (functions if functions is not None
                          else module_functions(rule.facts.tree))
        self.function_types = function_types or {}
        # module class of this file -> the forward() parameter types annotate gave it
        self.forward_types = forward_types or {}
        # function of another file called by an imported name -> its positional parameters
        # (``Tensor`` where TorchScript types them so, else "")
        self.imported = imported or {}
        self.typer = self.body_typer()

    def skip(self, node: cst.CSTNode, reason: str, *, code: str | None = None,
             message: str = "") -> None:
        self.rule.skip(self.class_name, node, f"{self.name}(): {reason}", code=code,
                       message=message)

    def fixed(self, node: cst.CSTNode, code: str, message: str) -> None:
        self.rule.fixed(node, code, message)

    def annotation(self, kind: str) -> cst.Annotation:
        return annotation(self.rule, kind)

    def body_typer(self) -> Typer:
        """A typer of the body: the parameters as the facts type them (annotation, example
        calls, literal default, use as a Tensor), overridden by the new signature's types and
        the empty literals typed so far. Its own copy: annotate adds to its environment."""
        observed = {key: kind for key, value in self.observed.items()
                    if (kind := from_observation(value)) is not None}
        env: dict[str, str | None] = {**self.facts.parameter_types(self.name, observed),
                                      **self.param_types}
        typer = CalleeTyper(env, self.facts, self.self_var, self.functions)
        collect_locals(self.func.body, typer)
        typer.env.update(self.decided)
        return typer
