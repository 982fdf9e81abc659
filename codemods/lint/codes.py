"""Every ``tsfix check`` code: the linter's own (``TSF1xx``, constructs no rule rewrites) and
those each rule declares in its module (``TSF2xx``, ``Rule.CODES``).

Codes are stable. Each was measured on torch 2.13 with a minimal class
(``fixtures/check/blockers.py`` holds one class per code; ``tests/test_check.py`` scripts them).
A code names the construct, not its fix: whether a rule fixes a given site is decided by that
rule on that site (a finding's ``fix`` or ``refused``).
"""

from __future__ import annotations

import functools

from tsfix.codemods.rules.base import Code

LINT_CODES: tuple[Code, ...] = (
    Code("TSF101", "try-except", "try/except in a compiled method",
         "TorchScript has no exception handling (\"try blocks aren't supported\"), even in "
         "code under `if not torch.jit.is_scripting():`. Move the try into a "
         "@torch.jit.ignore method or check the condition explicitly."),
    Code("TSF102", "lambda", "lambda in a compiled method",
         "TorchScript rejects lambdas (\"Lambda aren't supported\"). Use a method or a "
         "module-level function (scripted recursively) instead."),
    Code("TSF103", "global-statement", "global/nonlocal statement in a compiled method",
         "TorchScript rejects `global` and `nonlocal` (\"global variables aren't "
         "supported\"). Keep the state in a module attribute or buffer."),
    Code("TSF104", "fstring-format-spec", "f-string with a format spec or conversion",
         "TorchScript supports plain f-strings only: `{x:.2f}` and `{x!r}` fail "
         "(\"Don't support formatting in JoinedStr\"). Use `{x}`, or str.format()."),
    Code("TSF105", "module-level-constant", "module-level variable read in a compiled method",
         "TorchScript cannot read a module-level variable of type list, dict, tuple, int, "
         "float, str or bool (\"python value of type 'list' cannot be used as a value\"). "
         "Copy it into a module attribute in __init__, or write the literal in the method."),
    Code("TSF106", "nested-function", "function or class defined inside a compiled method",
         "TorchScript rejects nested definitions (\"function definitions aren't supported\"). "
         "Move the function to a method or to module level."),
    Code("TSF107", "yield", "yield in a compiled method",
         "TorchScript has no generators (\"Yield aren't supported\"). Build and return a list."),
    Code("TSF108", "set-literal", "set literal or set comprehension",
         "TorchScript has no set type (\"Set aren't supported\"). Use a list or a "
         "Dict[T, bool]."),
    Code("TSF109", "walrus", "assignment expression (:=)",
         "TorchScript rejects assignment expressions (\"NamedExpr aren't supported\"). "
         "Assign on a line of its own."),
    Code("TSF110", "keyword-unpacking", "**kwargs unpacking in a call",
         "TorchScript cannot unpack a dict into keyword arguments (\"keyword-arg expansion is "
         "not supported\"). Pass the arguments by name."),
    Code("TSF111", "getattr-non-literal", "getattr() with a computed name",
         "TorchScript resolves attributes at compile time: getattr's second argument must be a "
         "string literal. Iterate a ModuleDict, or index a list of attributes."),
    Code("TSF112", "break-in-module-loop", "break/continue in a loop over a module container",
         "Loops over a ModuleList/Sequential/ModuleDict are unrolled, so `break` and "
         "`continue` are rejected in them. Use a flag and skip the work instead."),
    Code("TSF113", "zip-module-range", "zip() of a module container with range()",
         "A loop over a module container needs a static length; zip with range() has none "
         "(\"Can not iterate over a module list ... statically determinable length\"). Use "
         "enumerate(self.layers)."),
    Code("TSF114", "slice-assignment", "assignment to a slice of a list",
         "TorchScript rejects `a[i:j] = ...` on lists (\"Sliced expression not yet supported "
         "for subscripted assignment\"). Build a new list."),
    Code("TSF115", "starred-unpacking", "starred unpacking in an assignment or a display",
         "TorchScript cannot infer the size of `a, *rest = ...`, `[*xs, y]` or `tuple(xs)` "
         "(\"cannot statically infer the expected size of a list\"). Index explicitly."),
    Code("TSF116", "none-attribute-test", "attribute that may be None tested or compared",
         "The attribute is None for some configurations, and TorchScript types it NoneType: "
         "`self.mode == 'a'` fails with the misleading \"aten::eq ... found type 'NoneType'\", "
         "`if self.mode:` with \"Could not cast value of type NoneType to bool\". Test "
         "`self.mode is not None` first, or store a non-None default (e.g. '')."),
    Code("TSF117", "builtin-none-test", "function attribute tested against None",
         "A torch function stored in an attribute (`self.act = torch.relu`) can be called, but "
         "not tested (\"builtin cannot be used as a value\"). Store nn.Identity() instead of "
         "None and call it unconditionally."),
    Code("TSF118", "return-type-differs", "return statements of different types",
         "A compiled method has one return type: returning `out, skip` on one path and `out` "
         "on another (often by a constructor flag) fails (\"Previous return statement "
         "returned a value of type Tuple[Tensor, Tensor] but this return statement returns a "
         "value of type Tensor\"), as does an int on one path and a float on another, or a "
         "value other than the `-> T` annotation says (\"Return value was annotated as having "
         "type ...\"). Return one shape on every path (`return out, None` merges with "
         "`return out, skip` as Tuple[Tensor, Optional[Tensor]]), or declare the flag "
         "constant (`return_skip: torch.jit.Final[bool]` in the class body) so TorchScript "
         "compiles only the configured path. torch.export is not affected: it traces the "
         "path taken."),
    Code("TSF119", "rebound-to-another-type", "local re-bound to another type inside a block",
         "A name keeps the type it has in the block that first binds it: assigning it a "
         "value of another type inside an if, for or while fails (\"Variable 'x' previously "
         "had type Tensor but is now being assigned to a value of type PackedSequence\"); "
         "in the same block it is allowed. Give the new value its own name "
         "(`packed = pack_padded_sequence(x, lengths)`) and read that name until the block "
         "binds the old name again, or declare the wider type first (`y: Optional[Tensor] = "
         "x`). torch.export is not affected: it runs the Python as written."),
)


@functools.cache
def all_codes() -> dict[str, Code]:
    """Every code, the linter's and the rules', in code order."""
    from tsfix.codemods.rules.registry import rule_codes

    found = {code.code: code for code in LINT_CODES}
    found.update({name: code for name, (code, _) in rule_codes().items()})
    return dict(sorted(found.items()))


@functools.cache
def rule_of_code(code: str) -> str | None:
    """The rule that declares ``code`` (the one that finds and may fix it), if any."""
    from tsfix.codemods.rules.registry import rule_codes

    entry = rule_codes().get(code)
    return entry[1].name if entry else None
