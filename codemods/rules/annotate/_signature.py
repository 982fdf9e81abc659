"""Signatures: parameter types, defaults TorchScript rejects, ``*args``/``**kwargs`` and
keyword-only parameters.

Every parameter site that blocks ``torch.jit.script`` (codes TSF206-TSF210, the old linter's
``_check_signature``) is reported once: :meth:`Rule.fixed` when the signature is rewritten for
it, else a coded :meth:`Rule.skip` whose reason says why it is left.
"""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, find_all, names_used
from tsfix.codemods.facts.value_types import (
    TENSOR,
    is_complete,
    parts_of,
    type_from_annotation,
    unify,
    unify_all,
    without_none,
)
from tsfix.codemods.rules.annotate._body import stored_in
from tsfix.codemods.rules.annotate._common import from_observation, is_name
from tsfix.codemods.rules.annotate._evidence import usage_type
from tsfix.codemods.rules.annotate._refine import refinement
from tsfix.codemods.rules.annotate._state import FunctionFacts, MethodState
from tsfix.codemods.rules.variable_arguments import ordinary_signature, without_trailing_comma

_MUTABLE = (cst.List, cst.Dict, cst.Set, cst.ListComp, cst.DictComp, cst.SetComp)


class Signature:
    """The new parameters of one compiled method."""

    def __init__(self, method: MethodState) -> None:
        self.method = method

    def rewrite(self) -> cst.Parameters:
        m = self.method
        p = m.func.params
        positional = list(p.params)
        first_is_self = m.self_var is not None
        if first_is_self:
            if p.posonly_params:
                posonly = list(p.posonly_params)[1:]
            else:
                posonly = []
                positional = positional[1:]
        else:
            posonly = list(p.posonly_params)
        kwonly = list(p.kwonly_params)
        star_arg, star_kwarg = p.star_arg, p.star_kwarg
        changed = False
        used = names_used(m.func.body)

        if isinstance(m.facts, FunctionFacts):
            # Compiled methods' *args/**kwargs/keyword-only parameters are variable-arguments'
            # (it reads the tree for their callers); a function's, the same rewrite here.
            given = p.with_changes(params=positional, posonly_params=posonly)
            plan = ordinary_signature(given, m.name, used,
                                      lambda label: _unsafe_removal(m, label))
            for site in plan.sites:
                if site.reason is None:
                    m.fixed(site.node, "TSF210", site.message)
                else:
                    m.skip(site.node, site.reason, code="TSF210" if site.blocker else None,
                           message=site.message)
            m.counts.parts.extend(plan.parts)
            m.counts.notes.extend(plan.notes)
            changed = plan.params is not given
            positional, kwonly = list(plan.params.params), list(plan.params.kwonly_params)
            star_arg, star_kwarg = plan.params.star_arg, plan.params.star_kwarg

        typed: list[cst.Param] = []
        for param in [*posonly, *positional, *kwonly]:
            new = self._parameter(param)
            changed = changed or new is not param
            typed.append(new)
        if not changed:
            return p
        new_posonly = typed[:len(posonly)]
        new_positional = typed[len(posonly):len(posonly) + len(positional)]
        new_kwonly = typed[len(posonly) + len(positional):]
        if first_is_self:
            if p.posonly_params:
                new_posonly = [p.posonly_params[0], *new_posonly]
            else:
                new_positional = [p.params[0], *new_positional]
        if not new_kwonly and not isinstance(star_arg, cst.Param | cst.ParamStar) and \
                not isinstance(star_kwarg, cst.Param):
            new_positional = without_trailing_comma(new_positional)
        return p.with_changes(posonly_params=new_posonly, params=new_positional,
                              kwonly_params=new_kwonly, star_arg=star_arg,
                              star_kwarg=star_kwarg)

    # -- one parameter ---------------------------------------------------------------------------

    def _parameter(self, param: cst.Param) -> cst.Param:
        m = self.method
        name = param.name.value
        if param.annotation is not None:
            return self._annotated_default(param)
        observed = from_observation(m.observed.get(name))
        default = param.default
        if default is None:
            return self._required(param, observed)
        if is_name(default, "None"):
            return self._none_default(param, observed)
        if isinstance(default, cst.List | cst.Dict):
            return self._mutable_default(param, observed)
        literal = m.typer.type_of(default)
        if literal is None or not is_complete(literal) or literal == TENSOR:
            reason = (f"cannot tell the type of {name}'s default `{code_of(default)}`; left "
                      "unannotated")
            if isinstance(default, _MUTABLE):
                m.skip(param, reason, code="TSF209", message=_mutable(name, m.name))
            elif (literal_kind := _default_kind(default)) is not None:
                m.skip(param, reason, code="TSF206",
                       message=_unannotated(name, m.name, literal_kind))
            else:
                m.skip(param, reason)
            return param
        kind = literal
        if observed is not None and without_none(observed):
            widened = unify(literal, without_none(observed))
            if widened is not None and widened != literal:
                kind = widened
                m.counts.observed += 1
            else:
                m.counts.static += 1
        else:
            m.counts.static += 1
        m.param_types[name] = kind
        m.fixed(param, "TSF206", _unannotated(name, m.name, _default_kind(default) or literal))
        return self._annotated(param, kind)

    def _required(self, param: cst.Param, observed: str | None) -> cst.Param:
        m = self.method
        name = param.name.value
        static = usage_type(m, name, weak=False)
        if observed is not None:
            if observed == TENSOR or observed == "None" or not is_complete(observed):
                return param
            m.counts.observed += 1
            kind = observed
        elif static is not None and static != TENSOR and is_complete(static):
            m.counts.static += 1
            kind = static
        else:
            return param
        m.param_types[name] = kind
        return self._annotated(param, kind)

    def _none_default(self, param: cst.Param, observed: str | None) -> cst.Param:
        m = self.method
        name = param.name.value
        message = (f"parameter {name!r} of {m.name}() defaults to None without an annotation "
                   "(typed Optional[Tensor])")
        seen = without_none(observed) if observed else None
        static = usage_type(m, name)
        if seen is not None and is_complete(seen):
            inner = seen
            m.counts.observed += 1
        elif static is not None and is_complete(static):
            inner = static
            m.counts.static += 1
        else:
            m.skip(param, f"{name}=None: neither its uses nor an example call tell its type; "
                   "left unannotated (TorchScript takes it for a Tensor)", code="TSF207",
                   message=message)
            return param
        kind = f"Optional[{inner}]"
        plan = refinement(m, name)
        if plan.needed and not plan.complete:
            # Unannotated it compiles (as a Tensor); Optional would not compile here.
            m.skip(param, f"{name}=None would be {kind}, but it is used without an `is not "
                   "None` test at a place where an assert cannot be added (a use that does not "
                   "fail on None in eager code, or one only some paths of its statement "
                   "reach); left unannotated", code="TSF207", message=message)
            return param
        m.param_types[name] = kind
        m.fixed(param, "TSF207", message)
        return self._annotated(param, kind)

    def _mutable_default(self, param: cst.Param, observed: str | None) -> cst.Param:
        m = self.method
        name = param.name.value
        default = param.default
        assert default is not None
        literal = m.typer.type_of(default)
        kind = unify(literal, without_none(observed)) if observed and without_none(observed) \
            else literal
        if kind is not None and not is_complete(kind):
            elements, keys = stored_in(m, name)
            element, key = unify_all(elements), unify_all(keys)
            if isinstance(default, cst.List) and element:
                kind = unify(kind, f"List[{element}]")
            elif isinstance(default, cst.Dict) and element and key:
                kind = unify(kind, f"Dict[{key}, {element}]")
        if kind is None or not is_complete(kind):
            m.skip(param, f"{name}: a mutable default whose element type is unknown; left as "
                   "it is", code="TSF209", message=_mutable(name, m.name))
            return param
        source = "observed" if observed else "static"
        setattr(m.counts, source, getattr(m.counts, source) + 1)
        m.fixed(param, "TSF209", _mutable(name, m.name))
        head, args = parts_of(kind)
        if (head == "List" and isinstance(default, cst.List) and default.elements
                and self._only_read(name)):
            as_tuple = f"Tuple[{', '.join([args[0]] * len(default.elements))}]"
            tuple_default = cst.Tuple([cst.Element(e.value) for e in default.elements])
            m.param_types[name] = as_tuple
            return self._annotated(param.with_changes(default=tuple_default), as_tuple)
        self._fill_in(name, default)
        m.param_types[name] = kind
        return self._annotated(param.with_changes(default=cst.Name("None")), f"Optional[{kind}]")

    def _annotated_default(self, param: cst.Param) -> cst.Param:
        """An annotated parameter: ``k: int = None`` becomes ``k: Optional[int] = None``;
        ``sizes: List[int] = [2, 4]`` becomes ``sizes: Optional[List[int]] = None`` and a
        fill-in line (the author's type is kept: a tuple would fix the length)."""
        m = self.method
        name = param.name.value
        default = param.default
        declared = param.annotation
        assert declared is not None
        annotation = declared.annotation
        if default is None:
            return param
        optional = _optional_annotation(annotation)
        filled = False      # the default moved into a fill-in line: never None in the body
        if is_name(default, "None") and not optional:
            message = (f"parameter {name!r} of {m.name}() defaults to None but its annotation "
                       "is not Optional")
            if isinstance(annotation, cst.SimpleString | cst.ConcatenatedString):
                m.skip(param, f"{name}'s annotation is a string; left as it is", code="TSF208",
                       message=message)
                return param
            m.fixed(param, "TSF208", message)
        elif isinstance(default, _MUTABLE):
            message = _mutable(name, m.name)
            if isinstance(default, cst.Set | cst.SetComp):
                m.skip(param, f"{name}: a set default, and TorchScript has no set type; left "
                       "as it is", code="TSF209", message=message)
                return param
            if optional:
                m.skip(param, f"{name} is Optional already, so None cannot stand for its "
                       "default; left as it is", code="TSF209", message=message)
                return param
            if isinstance(annotation, cst.SimpleString | cst.ConcatenatedString):
                m.skip(param, f"{name}'s annotation is a string; left as it is", code="TSF209",
                       message=message)
                return param
            m.fixed(param, "TSF209", message)
            self._fill_in(name, default)
            param, filled = param.with_changes(default=cst.Name("None")), True
        else:
            return param
        m.counts.static += 1
        wrapped = cst.parse_expression(f"Optional[{code_of(annotation)}]")
        m.rule.need_typing("Optional")
        kind = type_from_annotation(wrapped)
        if kind is not None:
            m.param_types[name] = (without_none(kind) or kind) if filled else kind
        return param.with_changes(annotation=declared.with_changes(annotation=wrapped))

    def _fill_in(self, name: str, default: cst.BaseExpression) -> None:
        self.method.prologue.append(f"if {name} is None:\n    {name} = {code_of(default)}")

    def _annotated(self, param: cst.Param, kind: str) -> cst.Param:
        return param.with_changes(annotation=self.method.annotation(kind),
                                  equal=cst.MaybeSentinel.DEFAULT)

    def _only_read(self, name: str) -> bool:
        """True when ``name`` is only iterated, indexed, measured or passed on: then a tuple
        behaves like the list in eager mode too."""
        body = self.method.func.body
        allowed: set[int] = set()
        for node in find_all(body, cst.For, cst.Subscript, cst.Call, cst.Arg, cst.Element,
                             cst.Assign, cst.AugAssign, cst.Attribute):
            if isinstance(node, cst.For) and is_name(node.iter, name):
                allowed.add(id(node.iter))
            elif isinstance(node, cst.Subscript | cst.Arg) and is_name(node.value, name) and \
                    not (isinstance(node, cst.Arg) and node.star):
                allowed.add(id(node.value))
        for target in find_all(body, cst.AssignTarget):
            if any(is_name(n, name) for n in find_all(target, cst.Name)) and \
                    not is_name(target.target, name):
                return False
        reads = [n for n in find_all(body, cst.Name) if n.value == name]
        return all(id(n) in allowed for n in reads)


def _unsafe_removal(m: MethodState, label: str) -> tuple[bool, str]:
    """A function's unused ``*args``/``**kwargs`` go only with ``--unsafe-fixes``: its callers
    are not traced."""
    if m.rule.unsafe_fixes:
        return True, (f"unsafe fix: removed unused {label} from {m.name}(); callers that "
                      "passed extra arguments now get a TypeError")
    return False, (f"{label} is never read, but TorchScript rejects it; removing it changes "
                   "what callers may pass (--unsafe-fixes removes it)")


# ---- the linter's texts for these sites ----------------------------------------------------------

def _unannotated(name: str, method: str, kind: str) -> str:
    return (f"parameter {name!r} of {method}() has a {kind} default but no annotation "
            "(typed Tensor)")


def _mutable(name: str, method: str) -> str:
    return f"mutable default for {name!r} in {method}()"


def _default_kind(node: cst.BaseExpression) -> str | None:
    """The literal kinds of default the linter reported as TSF206."""
    if isinstance(node, cst.Tuple):
        return "tuple"
    if isinstance(node, cst.Integer):
        return "int"
    if isinstance(node, cst.Float):
        return "float"
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        return "str"
    if is_name(node, "True") or is_name(node, "False"):
        return "bool"
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _default_kind(node.expression)
    return None


def _optional_annotation(node: cst.BaseExpression) -> bool:
    text = code_of(node)
    return "Optional" in text or "None" in text or "Any" in text
