"""einops patterns read from source and planned as a chain of tensor methods, for
``einops-to-torch``. Pure Python: neither einops nor torch nor LibCST is imported.

:func:`plan` takes what a call says (``rearrange``/``repeat``/``reduce``, the pattern, the
reduction, the keyword axis sizes as source text) and returns the methods to chain on the input
(``x.unflatten(2, (h, -1)).permute(0, 2, 1, 3)``), or raises :class:`Unsupported` saying why not.
The steps are einops' own recipe, in its order (``einops.einops._apply_recipe`` for torch):
split the composite input axes, reduce, permute, add the new axes (``unsqueeze`` +
``expand``), merge the composite output axes. Each step reads only the tensor it is applied to,
so the input expression is evaluated once and the call stays an expression; the one exception
(``repeat`` with an ellipsis and a new axis: ``expand`` needs every size) reads the input's
shape again and is planned only for an input that is a name or attribute.

Size-1 axes of the input (``1``, ``()``) are matched with the size-1 or new axes of the output
in the same place (``'1 1 d -> b 1 d'`` is ``expand(b, -1, -1)``, not a squeeze and an
unsqueeze); any matching gives the same values, this one gives the shortest chain.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

ELLIPSIS = "..."
KINDS = ("rearrange", "repeat", "reduce")
# einops' reductions -> the tensor method and whether it takes one dim at a time (einops' torch
# backend reduces "prod", "any" and "all" one axis at a time, the highest first).
REDUCTIONS: Mapping[str, tuple[str, bool]] = {
    "sum": ("sum", False), "mean": ("mean", False), "max": ("amax", False),
    "min": ("amin", False), "prod": ("prod", True), "any": ("any", True), "all": ("all", True)}
_KEEPDIM = frozenset({"sum", "mean", "amax", "amin"})


class Unsupported(ValueError):
    """A pattern the rule cannot prove (or that einops itself rejects)."""


@dataclass(frozen=True)
class _Group:
    """One axis of a side as written: a name, a number, ``...`` or a parenthesised list."""

    items: tuple[str, ...]          # names, decimal numbers, "..."
    composite: bool


@dataclass
class Plan:
    """The tensor methods to chain on the input, as source text: ``{input}`` stands for the
    input expression (only in an ``expand`` after an ellipsis)."""

    calls: list[str] = field(default_factory=list)
    reads_input_again: bool = False
    # The axis names whose given lengths the chain uses (the others einops only checks).
    used: set[str] = field(default_factory=set)

    def chain(self, input_code: str) -> str:
        return "".join(f".{call}".replace("{input}", input_code) for call in self.calls)


def _parse_side(text: str) -> list[_Group]:
    groups: list[_Group] = []
    current: list[str] | None = None
    for token in text.replace("(", " ( ").replace(")", " ) ").split():
        if token == "(":
            if current is not None:
                raise Unsupported("nested parentheses (einops rejects them)")
            current = []
        elif token == ")":
            if current is None:
                raise Unsupported("unbalanced parentheses")
            groups.append(_Group(tuple(current), True))
            current = None
        else:
            if token != ELLIPSIS and not token.isdecimal() and not token.isidentifier():
                raise Unsupported(f"axis {token!r} is not a name, a number or '...'")
            if token.isidentifier() and (token.startswith("_") or token.endswith("_")):
                raise Unsupported(f"axis name {token!r} starts or ends with '_' (einops "
                                  "rejects it)")
            if token.isdecimal() and int(token) == 0:
                raise Unsupported("an axis of length 0")
            if current is not None:
                current.append(token)
            else:
                groups.append(_Group((token,), False))
    if current is not None:
        raise Unsupported("unbalanced parentheses")
    return groups


def _names(groups: Sequence[_Group]) -> list[str]:
    return [item for group in groups for item in group.items if item.isidentifier()]


def _is_unit(group: _Group) -> bool:
    """``1``, ``()``, ``(1 1)``: an axis of length 1."""
    return all(item.isdecimal() and int(item) == 1 for item in group.items)


def _members(group: _Group) -> list[str]:
    """The axes a group is made of, length-1 numbers left out."""
    return [item for item in group.items if not (item.isdecimal() and int(item) == 1)]


class _Layout:
    """The axes of the tensor between two steps, as tokens; ``...`` stands for any number of
    axes, so an axis after it is addressed from the end."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens

    def index(self, token: str, *, last: bool = False) -> int:
        """The dim of ``token`` (the first dim of ``...``, or its last with ``last``)."""
        position = self.tokens.index(token)
        ellipsis = self.tokens.index(ELLIPSIS) if ELLIPSIS in self.tokens else len(self.tokens)
        if position < ellipsis or (token == ELLIPSIS and not last):
            return position
        return position - len(self.tokens)


def _dims(dims: Sequence[int]) -> str:
    return str(dims[0]) if len(dims) == 1 else f"[{', '.join(map(str, dims))}]"


def _moved(tokens: list[str], sources: list[int], targets: list[int], rank: int) -> list[str]:
    """What ``movedim(sources, targets)`` does to ``tokens`` (``...`` as ``rank`` axes)."""
    ellipsis = [f"...{i}" for i in range(rank)]
    flat = list(itertools.chain.from_iterable(ellipsis if t == ELLIPSIS else [t] for t in tokens))
    size = len(flat)
    sources = [s % size for s in sources]
    targets = [t % size for t in targets]
    result: list[str | None] = [None] * size
    for source, target in zip(sources, targets, strict=True):
        result[target] = flat[source]
    rest = iter(t for i, t in enumerate(flat) if i not in sources)
    return [t if t is not None else next(rest) for t in result]


def _permute(layout: _Layout, order: list[str]) -> str | None:
    """The call that puts ``layout``'s tokens in ``order`` (None: they are in order)."""
    tokens = layout.tokens
    if tokens == order:
        return None
    moved = [t for t, o in zip(tokens, order, strict=True) if t != o]
    if len(moved) == 2 and ELLIPSIS not in moved:
        first, second = (layout.index(t) for t in moved)
        return f"transpose({first}, {second})"
    if ELLIPSIS not in tokens:
        return f"permute({', '.join(str(tokens.index(t)) for t in order)})"
    target = _Layout(order)
    for candidates in ([t for t in moved if t != ELLIPSIS],
                       [t for t in tokens if t != ELLIPSIS]):
        sources = [layout.index(t) for t in candidates]
        targets = [target.index(t) for t in candidates]
        if all(_moved(tokens, sources, targets, rank) == _moved(order, [], [], rank)
               for rank in range(4)):
            if len(candidates) == 1:
                return f"movedim({sources[0]}, {targets[0]})"
            return f"movedim({_dims(sources)}, {_dims(targets)})"
    raise Unsupported("no movedim() reorders these axes around the ellipsis")


def plan(kind: str, pattern: str, sizes: Mapping[str, str], reduction: str | None = None) -> Plan:
    """The chain for ``kind(x, pattern, reduction, **sizes)``; ``sizes`` maps axis names to the
    source text of their lengths."""
    if kind not in KINDS:
        raise Unsupported(f"einops.{kind} is not rearrange, repeat or reduce")
    left_text, arrow, right_text = pattern.partition("->")
    if not arrow or "->" in right_text:
        raise Unsupported("the pattern has no single '->'")
    left, right = _parse_side(left_text), _parse_side(right_text)
    left_names, right_names = _names(left), _names(right)
    for side, names in (("input", left_names), ("output", right_names)):
        if len(set(names)) != len(names):
            raise Unsupported(f"an axis is named twice in the {side}")
        if sum(item == ELLIPSIS for g in (left if side == "input" else right)
               for item in g.items) > 1:
            raise Unsupported(f"more than one ellipsis in the {side}")
    left_ellipsis = any(ELLIPSIS in g.items for g in left)
    right_ellipsis = any(ELLIPSIS in g.items for g in right)
    if any(g.composite and ELLIPSIS in g.items for g in left):
        raise Unsupported("an ellipsis inside parentheses in the input")
    if left_ellipsis != right_ellipsis:
        raise Unsupported("an ellipsis on one side only (reducing over it is not translated)")
    unknown = sorted(set(sizes) - set(left_names) - set(right_names))
    if unknown:
        raise Unsupported(f"axis length given for {', '.join(unknown)}, not in the pattern")
    anonymous_left = [i for g in left for i in _members(g) if i.isdecimal()]
    anonymous_right = [i for g in right for i in _members(g) if i.isdecimal()]
    reduced = [n for n in left_names if n not in right_names]
    new = [n for n in right_names if n not in left_names]
    if kind == "rearrange":
        if reduced or new:
            raise Unsupported(f"axes {', '.join(reduced + new)} are on one side only")
        if anonymous_left or anonymous_right:
            raise Unsupported("a numbered axis other than 1 (einops rejects it in rearrange)")
    elif kind == "repeat":
        if reduced:
            raise Unsupported(f"axes {', '.join(reduced)} are not in the output of repeat")
        if anonymous_left:
            raise Unsupported("a numbered axis other than 1 in the input of repeat")
        missing = [n for n in new if n not in sizes]
        if missing:
            raise Unsupported(f"no length given for the new axis {', '.join(missing)}")
    else:
        if new:
            raise Unsupported(f"axes {', '.join(new)} are not in the input of reduce")
        if anonymous_right:
            raise Unsupported("a numbered axis other than 1 in the output of reduce")
        if reduction not in REDUCTIONS:
            raise Unsupported(f"reduction {reduction!r} is not one of "
                              f"{', '.join(REDUCTIONS)}")
    return _Planner(left, right, sizes, kind, reduction).run()


class _Planner:
    def __init__(self, left: list[_Group], right: list[_Group], sizes: Mapping[str, str],
                 kind: str, reduction: str | None) -> None:
        self.left, self.right, self.sizes = left, right, sizes
        self.kind, self.reduction = kind, reduction
        self.calls: list[str] = []
        self.used: set[str] = set()
        self.counter = itertools.count()

    def _token(self, item: str) -> str:
        """Names and ``...`` are their own tokens; numbers get a unique one (``#2.0``)."""
        return f"#{item}.{next(self.counter)}" if item.isdecimal() else item

    def _length(self, token: str) -> str | None:
        if token.startswith("#"):
            return token[1:].partition(".")[0]
        if token.isdecimal():
            return token
        if token in self.sizes:
            self.used.add(token)
        return self.sizes.get(token)

    def run(self) -> Plan:
        left_groups = self._split_input()
        final, composites, new_lengths = self._output(left_groups)
        self._reduce(left_groups, final)
        self._reorder_and_add(final, new_lengths)
        self._merge(composites)
        self._keepdim()
        return Plan(self.calls, any("{input}" in c for c in self.calls), self.used)

    # -- the steps ------------------------------------------------------------------------------

    def _split_input(self) -> list[list[str]]:
        """unflatten() each composite input axis; returns the tokens of each input group
        (a length-1 axis is one ``1.<n>`` token)."""
        groups = []
        for group in self.left:
            if _is_unit(group):
                groups.append([f"1.{next(self.counter)}"])
            else:
                groups.append([self._token(item) for item in _members(group)])
        layout = _Layout([g[0] if len(g) == 1 else f"({next(self.counter)})" for g in groups])
        for members, placeholder in zip(groups, list(layout.tokens), strict=True):
            if len(members) < 2:
                continue
            lengths = [self._length(t) for t in members]
            if lengths.count(None) > 1:
                unknown = [t for t, length in zip(members, lengths, strict=True)
                           if length is None]
                raise Unsupported(f"the lengths of {', '.join(unknown)} are not given: only "
                                  "one axis of a composite can be inferred")
            shown = ", ".join(length or "-1" for length in lengths)
            self.calls.append(f"unflatten({layout.index(placeholder)}, ({shown}))")
            at = layout.tokens.index(placeholder)
            layout.tokens[at:at + 1] = members
        self.layout = layout
        return groups

    def _output(self, left_groups: list[list[str]]
                ) -> tuple[list[str], list[list[str]], dict[str, str]]:
        """The output's axes before merging, its composites, and the lengths of the axes to
        add; length-1 input axes are matched with the length-1 or new output axes in the same
        place (between the same kept axes)."""
        units: dict[int, list[str]] = {}
        kept = 0
        for tokens in left_groups:
            if tokens[0].startswith("1."):
                units.setdefault(kept, []).append(tokens[0])
            else:
                kept += 1
        final: list[str] = []
        composites: list[list[str]] = []
        lengths: dict[str, str] = {}
        kept = 0
        left_names = set(_names(self.left))
        for group in self.right:
            members = _members(group)
            bare_new = (not group.composite and len(members) == 1
                        and members[0] not in left_names and members[0] != ELLIPSIS)
            if _is_unit(group) or bare_new:
                length = "1" if _is_unit(group) else self._length(members[0]) or "1"
                waiting = units.get(kept, [])
                token = waiting.pop(0) if waiting else f"+{next(self.counter)}"
                if length != "1":
                    lengths[token] = length
                final.append(token)
                continue
            kept += 1
            tokens = []
            for item in members:
                if item == ELLIPSIS or item in left_names:
                    tokens.append(item)
                else:
                    token = f"+{next(self.counter)}"
                    lengths[token] = self._length(item) or "1"
                    tokens.append(token)
            if tokens == [ELLIPSIS] and group.composite:
                # (...) of no axes is one axis of length 1 in einops; flatten() needs an axis.
                tokens.append(f"+{next(self.counter)}")
            final.extend(tokens)
            if len(tokens) > 1:
                composites.append(tokens)
        return final, composites, lengths

    def _reduce(self, left_groups: list[list[str]], final: list[str]) -> None:
        layout = self.layout
        for token in [t for g in left_groups for t in g if t.startswith("1.")]:
            if token not in final:
                self.calls.append(f"squeeze({layout.index(token)})")
                layout.tokens.remove(token)
        reduced = [t for t in layout.tokens if t not in final]
        if not reduced:
            return
        assert self.reduction is not None
        method, one_at_a_time = REDUCTIONS[self.reduction]
        if not one_at_a_time:
            self.calls.append(f"{method}({_dims([layout.index(t) for t in reduced])})")
            for token in reduced:
                layout.tokens.remove(token)
            return
        for token in sorted(reduced, key=layout.tokens.index, reverse=True):
            self.calls.append(f"{method}({layout.index(token)})")
            layout.tokens.remove(token)

    def _reorder_and_add(self, final: list[str], lengths: Mapping[str, str]) -> None:
        layout = self.layout
        present = set(layout.tokens)
        call = _permute(layout, [t for t in final if t in present])
        if call:
            self.calls.append(call)
            layout.tokens = [t for t in final if t in present]
        for token in final:
            if token not in present:
                at = sum(t in layout.tokens for t in final[:final.index(token)])
                layout.tokens.insert(at, token)
                self.calls.append(f"unsqueeze({layout.index(token)})")
        if not lengths:
            return
        if ELLIPSIS not in layout.tokens:
            self.calls.append(f"expand({', '.join(lengths.get(t, '-1') for t in final)})")
            return
        # expand() takes every length: the ellipsis' come from the input's shape.
        at = final.index(ELLIPSIS)
        left_at = next(i for i, g in enumerate(self.left) if ELLIPSIS in g.items)
        after = len(self.left) - left_at - 1
        shape = f"{{input}}.shape[{left_at or ''}:{-after if after else ''}]"
        parts = [f"[{', '.join(lengths.get(t, '-1') for t in final[:at])}]" if at else "",
                 f"list({shape})",
                 f"[{', '.join(lengths.get(t, '-1') for t in final[at + 1:])}]"
                 if at + 1 < len(final) else ""]
        self.calls.append(f"expand({' + '.join(p for p in parts if p)})")

    def _merge(self, composites: list[list[str]]) -> None:
        layout = self.layout
        for tokens in composites:
            start = layout.index(tokens[0])
            end = layout.index(tokens[-1], last=True)
            self.calls.append(f"flatten({start})" if end == -1 or (
                ELLIPSIS not in layout.tokens and end == len(layout.tokens) - 1)
                else f"flatten({start}, {end})")
            at = layout.tokens.index(tokens[0])
            merged = ELLIPSIS if ELLIPSIS in tokens else f"({next(self.counter)})"
            layout.tokens[at:at + len(tokens)] = [merged]

    def _keepdim(self) -> None:
        """``mean([2, 3]).unsqueeze(2).unsqueeze(3)`` is ``mean([2, 3], keepdim=True)``."""
        for index, call in enumerate(self.calls):
            method, _, args = call.partition("(")
            if method not in _KEEPDIM:
                continue
            dims = args.rstrip(")").strip("[]").split(", ")
            following = self.calls[index + 1:index + 1 + len(dims)]
            if following == [f"unsqueeze({d})" for d in dims] and all(
                    not d.startswith("-") for d in dims):
                self.calls[index:index + 1 + len(dims)] = [f"{call[:-1]}, keepdim=True)"]
                return
