"""What the compiled methods need of a setting's value: the type each use needs
(:class:`Usage`), and the int codes of a str setting compared only with string literals."""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
import libcst.matchers as m
from tsfix.codemods.facts.syntax import find_all, literal_type, self_name, short_source, unify_types
from tsfix.codemods.rules.lift_branch._reads import ReadKey, Reads, string_comparison

# What each use of a setting needs its value to be, measured (torch 2.13): an Optional[int]
# setting refined by ``if n is None: n = self.n`` serves truth tests, ``not``, ``and``/``or``,
# ``while``, ``<`` and arithmetic with ints, floats and tensors, ``range()``, indexes and slices;
# a bool serves arithmetic, comparisons and slices, not ``range()`` or an index; a float serves no
# ``range()``, index or slice. The attribute's value must have the lifted type exactly: an int
# attribute assigned to an ``Optional[float]`` or ``Optional[bool]`` argument fails to script.
_SERVES = {
    "int": (("int",), "an int"),
    "slice": (("int", "bool"), "an int"),
    "index": (("int", "str"), "an int index (or a str key)"),
    "number": (("int", "float", "bool"), "a number"),
    "str": (("str",), "a str"),
}


@dataclass
class Usage:
    """How the compiled methods use one setting's value."""

    none: bool = False                      # compared with None
    # What a use needs the value to be (a key of _SERVES) -> the first such use.
    needs: dict[str, cst.CSTNode] = field(default_factory=dict)
    # Types of the literals the value is compared or combined with (``n > 0.5``: float).
    hints: list[str] = field(default_factory=list)

    def guess(self) -> str | None:
        """The type the uses imply when ``__init__`` does not say: None when they show only
        that it is a number, "" when the literals disagree."""
        for need in ("int", "str", "slice"):
            if need in self.needs:
                return "int" if need == "slice" else need
        if self.hints:
            return unify_types(self.hints) or ""
        if "number" in self.needs:
            return None
        return "int" if "index" in self.needs else "bool"

    def unserved(self, described: str, kind: str) -> str:
        """Why a ``kind`` argument cannot serve some use, else ""."""
        for need, site in self.needs.items():
            kinds, wording = _SERVES[need]
            if kind not in kinds:
                return (f"{described} is {'an' if kind == 'int' else 'a'} {kind} but "
                        f"`{short_source(site)}` needs {wording}: no lifted type serves every use")
        return ""


_ORDERING = (cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual)


def _record_use(read: cst.CSTNode, parents: dict[int, cst.CSTNode], usage: Usage) -> None:
    """Adds to ``usage`` what the expression directly around ``read`` needs of its value."""
    parent = parents.get(id(read))
    if isinstance(parent, cst.Comparison):
        operands = [parent.left, *(t.comparator for t in parent.comparisons)]
        for at, target in enumerate(parent.comparisons):
            pair = operands[at:at + 2]
            if read not in pair:
                continue
            other = pair[1] if pair[0] is read else pair[0]
            if m.matches(other, m.Name("None")):
                usage.none = True
            elif isinstance(target.operator, cst.In | cst.NotIn):
                if other is pair[1] and isinstance(other, cst.Tuple | cst.List | cst.Set):
                    usage.hints += [kind for e in other.elements
                                    if (kind := literal_type(e.value)) is not None]
            elif not isinstance(target.operator, cst.Is | cst.IsNot):
                kind = literal_type(other)
                if kind is not None:
                    usage.hints.append(kind)
                if isinstance(target.operator, _ORDERING) and kind != "str":
                    usage.needs.setdefault("number", parent)
    elif isinstance(parent, cst.BinaryOperation):
        other = parent.right if parent.left is read else parent.left
        kind = literal_type(other)
        if kind == "str":
            if isinstance(parent.operator, cst.Add):
                usage.needs.setdefault("str", parent)
            elif isinstance(parent.operator, cst.Multiply):
                usage.needs.setdefault("int", parent)
            # else: "%" formatting takes any value
        elif isinstance(parent.operator, cst.LeftShift | cst.RightShift):
            usage.needs.setdefault("int", parent)
        elif not isinstance(parent.operator, cst.BitAnd | cst.BitOr | cst.BitXor):
            usage.needs.setdefault("number", parent)
            if kind is not None and not isinstance(parent.operator, cst.Divide):
                usage.hints.append(kind)
    elif isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator,
                                                               cst.Minus | cst.Plus):
        usage.needs.setdefault("number", parent)
    elif isinstance(parent, cst.Arg) and parent.keyword is None:
        call = parents.get(id(parent))
        if isinstance(call, cst.Call) and m.matches(call.func, m.Name("range")):
            usage.needs.setdefault("int", call)
    elif isinstance(parent, cst.Index):
        usage.needs.setdefault("index", parents.get(id(parents.get(id(parent))), parent))
    elif isinstance(parent, cst.Slice):
        usage.needs.setdefault("slice", parents.get(id(parents.get(id(parent))), parent))


def usage_of(reads: Reads, key: ReadKey, reachable: list[str]) -> Usage:
    """How every read of ``key`` in the compiled methods uses the value: what it must be
    (an int for ``range()``, a number for ``<`` and arithmetic...) and the literals it is
    compared or combined with."""
    found = Usage()
    for name in reachable:
        func = reads.setup.methods[name]
        parents = reads.parents(func)
        for read_key, node in reads.all_reads(func.body, self_name(func) or "self"):
            if read_key == key:
                _record_use(node, parents, found)
    return found


def string_codes(reads: Reads, key: ReadKey, reachable: list[str]) -> dict[str, int] | None:
    """An int code for every string ``key`` is compared with, when every read of it in the
    compiled methods is one side of ``==`` / ``!=`` with a string literal; else None."""
    codes: dict[str, int] = {}
    for name in reachable:
        func = reads.setup.methods[name]
        self_var = self_name(func) or "self"
        compared: set[int] = set()
        for comparison in reads.comparisons(func):
            pair = string_comparison(comparison)
            if pair is None:
                continue
            read, literal = pair
            if reads.read_key(read, self_var) == key:
                compared.add(id(read))
                codes.setdefault(literal, len(codes))
        nodes = find_all(func.body, cst.Call, cst.Attribute, cst.Subscript)
        called = {id(c.func) for c in nodes if isinstance(c, cst.Call)}
        for node in nodes:
            if (not isinstance(node, cst.Call) and id(node) not in called
                    and reads.read_key(node, self_var) == key and id(node) not in compared):
                return None
    return codes or None
