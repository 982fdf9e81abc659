"""Rule names and one-line summaries, importable without LibCST.

``tsfix --help`` and ``tsfix rules`` must start fast (no LibCST, black or torch import), so the
names and summaries live here as plain strings, in ``--rule all`` order. Each rule class keeps
its own ``name`` and ``summary`` too; ``tests/test_cli.py`` checks that this table matches
:data:`tsfix.codemods.rules.registry.ALL_RULES` exactly.
"""

from __future__ import annotations

RULE_SUMMARIES: dict[str, str] = {
    "modulelist-iter": "Indexing a ModuleList/Sequential/ModuleDict with a variable becomes "
                       "iteration over the container; parameter names are unchanged.",
    "super-forward": "super().forward(x) in subclasses of torch layers becomes the layer's exact "
                     "functional form (self._conv_forward, F.linear, F.layer_norm, ...)",
    "flatten-parameters": "Guard rnn.flatten_parameters() calls in compiled methods with "
                          "`if not torch.jit.is_scripting():`",
    "drop-variable": "Replace legacy torch.autograd.Variable(t) in compiled methods with the "
                     "tensor (t.detach(), .requires_grad_() when asked)",
    "starred-args": "Starred list arguments (x.view(*shape), x.view(*x.shape[:2], -1), "
                    "torch.zeros(*size)) pass the sequence itself or its spelled-out elements",
    "sum-tensors": "Builtin sum() over tensors in compiled methods becomes an explicit "
                   "accumulation (or t.sum(0) for one tensor), exact in eager mode",
    "lift-branch": "Config-attribute branches in forward() become a typed forward() argument, "
                   "so one scripted or exported artifact keeps every path.",
    "numpy-to-torch": "Translate numpy calls in compiled methods to their exact torch / math "
                      "equivalents",
    "ignore-numpy": "Move numpy statements of compiled methods into a @torch.jit.ignore method",
    "annotate": "Annotate parameters, empty containers, returns and attributes that TorchScript "
                "cannot type",
}


class UnknownRuleError(ValueError):
    pass


def check_rule_names(names: list[str], known: list[str]) -> None:
    """Raise :class:`UnknownRuleError` naming the first of ``names`` that is not known."""
    for name in names:
        if name != "all" and name not in known:
            raise UnknownRuleError(
                f"unknown rule {name!r} (known: {', '.join(['all', *known])})")
