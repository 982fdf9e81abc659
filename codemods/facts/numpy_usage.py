"""Where model code uses numpy: what ``numpy-to-torch`` translates and ``ignore-numpy`` moves.

numpy is found by binding, not by spelling: a name counts when the file (or the function) binds
it to the numpy module or to something inside it -- ``import numpy as np``, ``import numpy``,
``from numpy import hanning``, ``from numpy import fft as npfft``. Besides names, two tensor
idioms pull numpy in: ``t.numpy()`` and ``torch.from_numpy(a)``. TorchScript compiles none of
them.

A local name that shadows a numpy binding (``np = self.count`` inside forward, a parameter
called ``np``) is not numpy there: the bindings of a function are the module's minus the names
the function itself assigns or takes, plus the numpy imports inside the function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import libcst as cst
from libcst.helpers import get_full_name_for_node
from tsfix.codemods.facts.syntax import find_all, qualified_name

NUMPY = "numpy"


def is_numpy_name(dotted: str | None) -> bool:
    return dotted is not None and (dotted == NUMPY or dotted.startswith(NUMPY + "."))


def numpy_bindings(imports: Iterable[cst.Import | cst.ImportFrom]) -> dict[str, str]:
    """Local name -> the numpy name it is bound to, for the given import statements."""
    found: dict[str, str] = {}
    for small in imports:
        if isinstance(small, cst.Import):
            for alias in small.names:
                full = get_full_name_for_node(alias.name) or ""
                if not is_numpy_name(full):
                    continue
                if alias.asname is not None:
                    local = get_full_name_for_node(alias.asname.name)
                    if local:
                        found[local] = full
                else:
                    found[NUMPY] = NUMPY       # ``import numpy.fft`` binds ``numpy``
        elif (isinstance(small, cst.ImportFrom) and small.relative == ()
              and small.module is not None and not isinstance(small.names, cst.ImportStar)):
            origin = get_full_name_for_node(small.module) or ""
            if not is_numpy_name(origin):
                continue
            for alias in small.names:
                imported = get_full_name_for_node(alias.name) or ""
                local = imported
                if alias.asname is not None:
                    local = get_full_name_for_node(alias.asname.name) or imported
                found[local] = f"{origin}.{imported}"
    return found


def module_numpy_bindings(module: cst.Module) -> dict[str, str]:
    """numpy bindings made by the module's top-level imports (also inside ``try``/``if``)."""
    statements: list[cst.Import | cst.ImportFrom] = []
    for stmt in module.body:
        if isinstance(stmt, cst.ClassDef | cst.FunctionDef):
            continue
        statements.extend(find_all(stmt, cst.Import, cst.ImportFrom))
    return numpy_bindings(statements)


def function_numpy_bindings(func: cst.FunctionDef, module_bindings: Mapping[str, str]
                            ) -> dict[str, str]:
    """numpy bindings visible inside ``func``: the module's, minus names the function binds
    itself (parameters, assignment targets), plus its own numpy imports."""
    local_imports = find_all(func.body, cst.Import, cst.ImportFrom)
    own = numpy_bindings(local_imports)
    bound_here = {p.name.value for p in find_all(func.params, cst.Param)}
    for target in find_all(func.body, cst.AssignTarget, cst.AnnAssign, cst.AugAssign,
                           cst.For, cst.CompFor, cst.WithItem, cst.NamedExpr):
        node = getattr(target, "target", None) or getattr(target, "asname", None)
        for name in find_all(node, cst.Name) if node is not None else ():
            bound_here.add(name.value)
    found = {k: v for k, v in module_bindings.items() if k not in bound_here}
    found.update(own)
    return found


@dataclass(frozen=True)
class NumpyUse:
    """One place numpy is used: ``node`` is the whole ``np.x.y`` reference, the ``.numpy()``
    call or the ``torch.from_numpy(...)`` call; ``name`` is what it refers to."""

    node: cst.CSTNode
    name: str           # "numpy.exp", "numpy.pi", ".numpy()", "torch.from_numpy"


def numpy_uses(node: cst.CSTNode, bindings: Mapping[str, str],
               imports: Mapping[str, str]) -> list[NumpyUse]:
    """Every numpy use inside ``node``, outermost reference first, in source order.

    ``bindings`` are the numpy names visible there (:func:`function_numpy_bindings`);
    ``imports`` is the module's import map (to recognise ``torch.from_numpy`` however torch
    is imported)."""
    uses: list[NumpyUse] = []
    inner: set[int] = set()     # ids of Names/Attributes already covered by an outer reference
    for found in find_all(node, cst.Attribute, cst.Name, cst.Call):
        if id(found) in inner:
            continue
        if isinstance(found, cst.Call):
            callee = found.func
            if (isinstance(callee, cst.Attribute) and callee.attr.value == "numpy"
                    and not found.args):
                uses.append(NumpyUse(found, ".numpy()"))
            elif qualified_name(callee, dict(imports)) == "torch.from_numpy":
                uses.append(NumpyUse(found, "torch.from_numpy"))
            continue
        if isinstance(found, cst.Attribute):
            # Never the ``.x`` of ``obj.x``: only chains whose root is a bound name count.
            for part in find_all(found, cst.Attribute, cst.Name):
                if part is not found:
                    inner.add(id(part))
            inner.add(id(found.attr))
            dotted = dotted_name(found)
            if dotted is None:
                # ``np.zeros(3).sum``: the root chain is found on its own below.
                inner.discard(id(found.value))
                for part in find_all(found.value, cst.Attribute, cst.Name):
                    inner.discard(id(part))
                continue
            head, _, rest = dotted.partition(".")
            if head in bindings:
                uses.append(NumpyUse(found, f"{bindings[head]}.{rest}"))
            continue
        if found.value in bindings:
            uses.append(NumpyUse(found, bindings[found.value]))
    return _without_keywords(node, uses)


def _without_keywords(node: cst.CSTNode, uses: list[NumpyUse]) -> list[NumpyUse]:
    """Drop names that only look like references: keyword names (``f(np=1)``), parameter
    names and the names an import statement binds."""
    not_references: set[int] = set()
    for arg in find_all(node, cst.Arg):
        if arg.keyword is not None:
            not_references.add(id(arg.keyword))
    for param in find_all(node, cst.Param):
        not_references.add(id(param.name))
    for alias in find_all(node, cst.ImportAlias):
        for part in find_all(alias, cst.Name, cst.Attribute):
            not_references.add(id(part))
    return [use for use in uses if id(use.node) not in not_references]


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names only (``f(x).y`` is None, unlike LibCST's helper)."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted_name(node.value)
        return f"{head}.{node.attr.value}" if head is not None else None
    return None


def may_use_numpy(text: str) -> bool:
    """Cheap pre-parse filter: could this file use numpy at all?"""
    return "numpy" in text
