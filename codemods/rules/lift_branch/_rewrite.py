"""The rewriting: reads replaced by the lifted parameters (and copied attributes), the
parameters added to each method's signature as it is laid out, config fields copied in
``__init__``."""

from __future__ import annotations

import libcst as cst
from tsfix.codemods.facts.syntax import docstring_count, self_attr
from tsfix.codemods.rules.lift_branch._onnx import onnx_preamble
from tsfix.codemods.rules.lift_branch._plan import Lift, Plan
from tsfix.codemods.rules.lift_branch._reads import ReadKey, Reads, string_comparison


class ReadReplacer(cst.CSTTransformer):
    """Replaces attribute/config reads in one method and passes lifted values on to helpers."""

    def __init__(self, reads: Reads, self_var: str,
                 replacements: dict[ReadKey, str], forwarded: dict[str, list[str]],
                 codes: dict[ReadKey, dict[str, int]] | None = None) -> None:
        self.reads = reads
        self.self_var = self_var
        self.replacements = replacements
        self.forwarded = forwarded
        self.codes = codes or {}

    def leave_Comparison(self, original_node: cst.Comparison,
                         updated_node: cst.Comparison) -> cst.BaseExpression:
        """``self.mode == "avg"`` -> ``mode_value == 0`` for a str setting lifted as a code."""
        pair = string_comparison(original_node)
        if pair is None:
            return updated_node
        key = self.reads.read_key(pair[0], self.self_var)
        if key not in self.codes:
            return updated_node
        code = cst.Integer(str(self.codes[key][pair[1]]))
        target = updated_node.comparisons[0]
        if isinstance(updated_node.left, cst.SimpleString):
            return updated_node.with_changes(left=code)
        return updated_node.with_changes(comparisons=[target.with_changes(comparator=code)])

    def _replace(self, original: cst.BaseExpression,
                 updated: cst.BaseExpression) -> cst.BaseExpression:
        key = self.reads.read_key(original, self.self_var)
        if key is None or key not in self.replacements:
            return updated
        return cst.parse_expression(self.replacements[key])

    def leave_Attribute(self, original_node: cst.Attribute,
                        updated_node: cst.Attribute) -> cst.BaseExpression:
        return self._replace(original_node, updated_node)

    def leave_Subscript(self, original_node: cst.Subscript,
                        updated_node: cst.Subscript) -> cst.BaseExpression:
        return self._replace(original_node, updated_node)

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        callee = self_attr(original_node.func, self.self_var)
        if callee is None or callee not in self.forwarded:
            return updated_node
        present = {a.keyword.value for a in updated_node.args if a.keyword is not None}
        extra = [cst.Arg(keyword=cst.Name(p), value=cst.Name(p),
                         equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
                 for p in self.forwarded[callee] if p not in present]
        return updated_node.with_changes(args=[*updated_node.args, *extra]) if extra else \
            updated_node


def _laid_out(previous: cst.Param, lead: cst.BaseParenthesizableWhitespace,
              new: list[cst.Param], *, last: bool) -> tuple[cst.Param, list[cst.Param]]:
    """``previous`` and the ``new`` parameters that follow it, laid out as the signature is:
    one per line at the previous parameter's indentation when ``lead`` (the whitespace before
    ``previous``) is a line break, else one space apart. Whatever followed ``previous`` (a
    comment, the line break before ``)``, a trailing comma) follows the last new one; a
    comment stays on ``previous``'s line."""
    if isinstance(lead, cst.ParenthesizedWhitespace):
        step: cst.BaseParenthesizableWhitespace = lead.with_changes(
            first_line=cst.TrailingWhitespace(), empty_lines=[])
    else:
        step = cst.SimpleWhitespace(" ")
    trailing_comma = isinstance(previous.comma, cst.Comma)
    if trailing_comma and not last:
        # Before **kwargs: previous keeps its comma; the new ones lead to **kwargs as it did.
        assert isinstance(previous.comma, cst.Comma)
        after = previous.comma.whitespace_after
        closing = after.with_changes(first_line=cst.TrailingWhitespace()) if isinstance(
            after, cst.ParenthesizedWhitespace) else after
        commas = [cst.Comma(whitespace_after=step)] * (len(new) - 1) + [
            cst.Comma(whitespace_after=closing)]
        return previous, [p.with_changes(comma=c) for p, c in zip(new, commas, strict=True)]
    old = (previous.comma.whitespace_after if isinstance(previous.comma, cst.Comma)
           else previous.whitespace_after_param)
    into_first, closing = step, old
    if isinstance(step, cst.ParenthesizedWhitespace) and isinstance(
            old, cst.ParenthesizedWhitespace):
        # A comment after previous stays on its line; the break before ``)`` comes last.
        into_first = step.with_changes(first_line=old.first_line)
        closing = old.with_changes(first_line=cst.TrailingWhitespace())
    previous = previous.with_changes(comma=cst.Comma(whitespace_after=into_first),
                                     whitespace_after_param=cst.SimpleWhitespace(""))
    laid = [p.with_changes(comma=cst.Comma(whitespace_after=step)) for p in new[:-1]]
    final = new[-1]
    if trailing_comma:
        final = final.with_changes(comma=cst.Comma(whitespace_after=closing))
    else:
        final = final.with_changes(whitespace_after_param=closing)
    return previous, [*laid, final]


def with_parameters(func: cst.FunctionDef, lifts: list[Lift], self_var: str,
                    tensor: str | None = None,
                    preamble: list[cst.BaseStatement] | None = None) -> cst.FunctionDef:
    """``tensor`` (how the file names torch.Tensor) selects the --target onnx form, or with
    ``preamble`` (the statements that fill in each parameter) the --target export form."""
    new_params = [cst.Param(cst.Name(lift.param),
                            annotation=cst.Annotation(cst.parse_expression(
                                f"Optional[{tensor or lift.type}]")),
                            default=cst.Name("None"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(" "),
                                                  cst.SimpleWhitespace(" ")))
                  for lift in lifts]
    params = func.params
    keyword_only = isinstance(params.star_arg, cst.Param) or bool(params.kwonly_params)
    # After *args (or among keyword-only parameters) so positional calls bind as before.
    existing = list(params.kwonly_params if keyword_only else params.params)
    previous = existing[-1] if existing else params.star_arg if keyword_only else None
    if isinstance(previous, cst.Param):
        # Laid out after the parameter they follow, as the whitespace before it is.
        shown = [*params.posonly_params, params.posonly_ind, *params.params, params.star_arg,
                 *params.kwonly_params]
        ahead = shown[:next(i for i, p in enumerate(shown) if p is previous)]
        commas = [p.comma for p in ahead if isinstance(p, cst.Param | cst.ParamStar
                                                       | cst.ParamSlash)]
        lead = (commas[-1].whitespace_after if commas and isinstance(commas[-1], cst.Comma)
                else func.whitespace_before_params)
        previous, new_params = _laid_out(previous, lead, new_params,
                                         last=params.star_kwarg is None)
        if existing:
            existing[-1] = previous
        else:
            params = params.with_changes(star_arg=previous)
    params = params.with_changes(**{"kwonly_params" if keyword_only else "params":
                                    [*existing, *new_params]})
    if preamble is not None:
        pass
    elif tensor is not None:
        preamble = [line for lift in lifts for line in onnx_preamble(lift, self_var)]
    else:
        preamble = [cst.parse_statement(f"if {lift.param} is None:\n"
                                        f"    {lift.param} = {self_var}.{lift.attr}\n")
                    for lift in lifts]
    body = func.body
    if isinstance(body, cst.SimpleStatementSuite):
        body = cst.IndentedBlock([cst.SimpleStatementLine(body.body)])
    assert isinstance(body, cst.IndentedBlock)
    at = docstring_count(body)
    body = body.with_changes(body=[*body.body[:at], *preamble, *body.body[at:]])
    return func.with_changes(params=params, body=body)


def reads_replaced(reads: Reads, plan: Plan, func: cst.FunctionDef,
                   self_var: str) -> tuple[cst.FunctionDef, list[Lift]]:
    """``func`` reading each lifted setting from its parameter (and copied config fields
    from their attributes), passing the parameters on to the helpers that need them; and
    the lifts whose parameter ``func`` takes."""
    name = func.name.value
    mine = [lift for lift in plan.lifts if name in lift.methods]
    replacements = {lift.key: lift.local or lift.param for lift in mine}
    codes = {lift.key: lift.codes for lift in mine if lift.codes is not None}
    for copy in plan.copies:
        replacements.setdefault(copy.key, f"{self_var}.{copy.attr}")
    forwarded: dict[str, list[str]] = {}
    for lift in mine:
        for callee in lift.methods - {name}:
            forwarded.setdefault(callee, []).append(lift.param)
    func = func.with_changes(body=func.body.visit(
        ReadReplacer(reads, self_var, replacements, forwarded, codes)))
    return func, mine


def copy_config_fields(plan: Plan, init: cst.FunctionDef, self_var: str) -> cst.FunctionDef:
    if not plan.copies:
        return init
    assert isinstance(init.body, cst.IndentedBlock)
    anchors = {index: holder for holder, index in plan.copy_after.items()}
    body: list[cst.BaseStatement] = []
    for index, statement in enumerate(init.body.body):
        body.append(statement)
        holder = anchors.get(index)
        if holder is None:
            continue
        for copy in plan.copies:
            if copy.key[1] == holder:
                source = f"{self_var}.{holder}{copy.access}"
                body.append(cst.parse_statement(f"{self_var}.{copy.attr} = {source}\n"))
    return init.with_changes(body=init.body.with_changes(body=body))
