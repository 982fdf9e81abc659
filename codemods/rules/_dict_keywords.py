"""A dict unpacked into a call's keywords, spelled out as the keywords themselves (part of
``variable-arguments``, TSF110): TorchScript cannot expand ``**`` in a call ("keyword-arg
expansion is not supported"), and the dict is often written where the call is, or built by
a one-line helper of the file (lucidrains' ``def to(x): return {'device': x.device, 'dtype':
x.dtype}``)::

    torch.zeros(n, **to(x))              ->  torch.zeros(n, device=x.device, dtype=x.dtype)
    F.pad(x, p, **{"value": 0.0})        ->  F.pad(x, p, value=0.0)
    nn.functional.gelu(x, **dict(approximate="tanh"))
                                         ->  nn.functional.gelu(x, approximate="tanh")

Exact: the same keywords with the same values in the same order. A helper's values are its
return display with each parameter replaced by the argument given for it, so an argument
must be a name or an attribute of names (read as often as the helper reads it, never
computed twice or skipped with a side effect), and a name the values read otherwise must not
be bound where the call stands (it is the module's, as in the helper). Refused, with the
reason: keys that are not string literals, or that repeat or collide with a keyword of the
call; a helper with defaults, ``*``/``**`` parameters, keyword arguments, or any statement but
its one ``return``; values with a lambda or comprehension.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import libcst as cst
from tsfix.codemods.facts.syntax import code_of, find_all, names_used


class Refused(Exception):
    """Why a ``**`` argument stays as it is."""


@dataclass(frozen=True)
class Helper:
    """A module-level function whose body is one ``return`` of a dict display."""

    params: tuple[str, ...]
    display: cst.Dict


def dict_helpers(module: cst.Module) -> dict[str, Helper]:
    """The module's functions that only return a dict display, by name (a name the module
    binds at top level more than once is left out: which one a call reaches is not known)."""
    found: dict[str, Helper] = {}
    seen: dict[str, int] = {}
    for statement in module.body:
        if isinstance(statement, cst.FunctionDef | cst.ClassDef):
            seen[statement.name.value] = seen.get(statement.name.value, 0) + 1
        if not isinstance(statement, cst.FunctionDef) or statement.decorators:
            continue
        params = statement.params
        body = statement.body.body if isinstance(statement.body, cst.IndentedBlock) else ()
        if ((params.star_arg is not None and not isinstance(params.star_arg, cst.MaybeSentinel))
                or params.star_kwarg is not None or params.kwonly_params
                or params.posonly_params or any(p.default is not None for p in params.params)
                or len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine)
                or len(body[0].body) != 1 or not isinstance(body[0].body[0], cst.Return)
                or not isinstance(body[0].body[0].value, cst.Dict)):
            continue
        found[statement.name.value] = Helper(tuple(p.name.value for p in params.params),
                                             body[0].body[0].value)
    return {name: helper for name, helper in found.items() if seen[name] == 1}


def spelled_keywords(arg: cst.Arg, call: cst.Call, helpers: Mapping[str, Helper],
                     bound: Collection[str]) -> list[cst.Arg]:
    """The keywords ``arg`` (a ``**`` argument of ``call``) unpacks, written out; raises
    :class:`Refused`. ``bound``: the names the function holding the call binds."""
    value = arg.value
    given: dict[str, cst.BaseExpression] = {}
    if isinstance(value, cst.Dict):
        pairs = _pairs(value)
    elif (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
          and value.func.value == "dict" and "dict" not in bound and "dict" not in helpers):
        if any(a.keyword is None for a in value.args):
            raise Refused("dict() is given more than keywords")
        pairs = [(a.keyword.value, a.value) for a in value.args if a.keyword is not None]
        if not pairs:
            raise Refused("the dict is empty")
    elif (isinstance(value, cst.Call) and isinstance(value.func, cst.Name)
          and value.func.value in helpers and value.func.value not in bound):
        helper = helpers[value.func.value]
        if any(a.keyword is not None or a.star for a in value.args) or (
                len(value.args) != len(helper.params)):
            raise Refused(f"{code_of(value)} passes its arguments otherwise than one by "
                          "position per parameter")
        for param, given_arg in zip(helper.params, value.args, strict=True):
            if not _plain_reference(given_arg.value):
                raise Refused(f"{code_of(given_arg.value)} is not a name or an attribute: "
                              "the keywords would compute it once each")
            given[param] = given_arg.value
        pairs = _pairs(helper.display)
        _check_names(helper, pairs, bound)
    else:
        raise Refused(f"{code_of(value)} is not a dict display, dict(...) or a helper of this "
                      "file that returns one")
    keys = [key for key, _ in pairs]
    taken = {a.keyword.value for a in call.args if a.keyword is not None}
    if len(set(keys)) != len(keys) or taken & set(keys):
        raise Refused("a keyword repeats")
    return [cst.Arg(value=_substituted(expr, given) if given else expr,
                    keyword=cst.Name(key), equal=cst.AssignEqual(
                        whitespace_before=cst.SimpleWhitespace(""),
                        whitespace_after=cst.SimpleWhitespace("")))
            for key, expr in pairs]


def _pairs(display: cst.Dict) -> list[tuple[str, cst.BaseExpression]]:
    if not display.elements:
        raise Refused("the dict is empty")
    pairs = []
    for element in display.elements:
        if not isinstance(element, cst.DictElement) or not isinstance(element.key,
                                                                       cst.SimpleString):
            raise Refused("a key is not a string literal")
        key = element.key.evaluated_value
        if not isinstance(key, str) or not key.isidentifier():
            raise Refused(f"key {code_of(element.key)} is not a keyword name")
        if find_all(element.value, cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp,
                    cst.GeneratorExp):
            raise Refused("a value holds a lambda or a comprehension")
        pairs.append((key, element.value))
    return pairs


def _check_names(helper: Helper, pairs: list[tuple[str, cst.BaseExpression]],
                 bound: Collection[str]) -> None:
    """A parameter is replaced wherever its name is read: it must never be an attribute's
    or keyword's name there; the other names read are the module's, also at the call."""
    for _, expr in pairs:
        keywords = {a.keyword.value for a in find_all(expr, cst.Arg) if a.keyword is not None}
        if keywords & set(helper.params):
            raise Refused("a parameter's name is also a keyword in the helper's values")
        outside = names_used(expr) - set(helper.params)
        if outside & set(bound):
            raise Refused(f"{', '.join(sorted(outside & set(bound)))} is bound where the "
                          "call stands, and is the module's in the helper")


def _plain_reference(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) or (isinstance(node, cst.Attribute)
                                          and _plain_reference(node.value))


class _Substitute(cst.CSTTransformer):
    def __init__(self, given: Mapping[str, cst.BaseExpression]) -> None:
        self.given = given
        self.attribute_names: set[int] = set()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.attribute_names.add(id(node.attr))

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name
                   ) -> cst.BaseExpression:
        if id(original_node) in self.attribute_names:
            return updated_node
        return self.given.get(original_node.value, updated_node)


def _substituted(expr: cst.BaseExpression, given: Mapping[str, cst.BaseExpression]
                 ) -> cst.BaseExpression:
    result = expr.visit(_Substitute(given))
    assert isinstance(result, cst.BaseExpression)
    return result
