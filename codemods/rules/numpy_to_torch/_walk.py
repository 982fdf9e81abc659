"""One method, statement by statement: each small statement (and each test or iterable of a
compound one) is a unit, translated as a whole or left; a name holding an array is translated
only if every unit reading it is, so the walk repeats until no translated unit feeds one that
is left."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import libcst as cst
from tsfix.codemods.facts.numpy_usage import numpy_uses
from tsfix.codemods.facts.syntax import bound_names, code_of, find_all
from tsfix.codemods.rules.numpy_to_torch._expressions import Expressions
from tsfix.codemods.rules.numpy_to_torch._state import Outcome, Unit
from tsfix.codemods.rules.numpy_to_torch._values import (
    ARRAY,
    FLAGGED,
    LITERAL,
    NUM,
    OPAQUE,
    OTHER,
    SCALAR0,
    TENS,
    UNKNOWN_VAL,
    Expr,
    Refuse,
    Val,
    atom,
    holds_array,
    type_string,
)


def _same_value(a: Val, b: Val) -> bool:
    return (a.kind, a.dtype, a.strong, a.alias, a.typ) == (b.kind, b.dtype, b.strong, b.alias,
                                                           b.typ)


def _join(a: dict[str, Val], b: dict[str, Val]) -> dict[str, Val]:
    out: dict[str, Val] = {}
    for name in a.keys() | b.keys():
        va, vb = a.get(name), b.get(name)
        if va is None or vb is None:
            one = va or vb
            assert one is not None
            if one.kind in FLAGGED or one.strong:
                out[name] = Val(OPAQUE, origins=one.origins, line=one.line)
            continue
        if _same_value(va, vb):
            out[name] = replace(va, origins=va.origins | vb.origins)
        elif va.kind in FLAGGED or vb.kind in FLAGGED or va.strong or vb.strong:
            out[name] = Val(OPAQUE, origins=va.origins | vb.origins, line=va.line or vb.line)
    return out


class MethodTranslator(Expressions):
    """One method: the walk over its statements, to a fixed point (:meth:`run`)."""

    def run(self) -> None:
        for _ in range(50):
            self.conflicts = {}
            self.outcomes = {}
            self._suite(self.func.body, {})
            new = {k: v for k, v in self.conflicts.items() if k not in self.refused}
            if not new:
                return
            self.refused.update(new)

    def _block(self, statements: Sequence[cst.BaseStatement],
               env: dict[str, Val]) -> dict[str, Val]:
        for statement in statements:
            env = self._statement(statement, env)
        return env

    def _suite(self, suite: cst.BaseSuite, env: dict[str, Val]) -> dict[str, Val]:
        if isinstance(suite, cst.IndentedBlock):
            return self._block(suite.body, dict(env))
        assert isinstance(suite, cst.SimpleStatementSuite)
        for small in suite.body:
            env = self._unit(self._new_unit(small, small, "small"), dict(env))
        return env

    def _new_unit(self, node: cst.CSTNode, owner: cst.CSTNode, kind: str) -> Unit:
        return Unit(node, owner, kind, self._compiled(node))

    def _statement(self, stmt: cst.BaseStatement, env: dict[str, Val]) -> dict[str, Val]:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                env = self._unit(self._new_unit(small, stmt, "small"), env)
            return env
        if isinstance(stmt, cst.If):
            env = self._unit(self._new_unit(stmt.test, stmt, "header"), env)
            after_body = self._suite(stmt.body, env)
            if isinstance(stmt.orelse, cst.If):
                after_else = self._statement(stmt.orelse, dict(env))
            elif isinstance(stmt.orelse, cst.Else):
                after_else = self._suite(stmt.orelse.body, env)
            else:
                after_else = env
            return _join(after_body, after_else)
        if isinstance(stmt, cst.For | cst.While):
            header = stmt.iter if isinstance(stmt, cst.For) else stmt.test
            entry = env
            for _ in range(2):
                env = self._unit(self._new_unit(header, stmt, "header"), dict(entry))
                if isinstance(stmt, cst.For):
                    env = self._bind_loop_target(stmt, header, env)
                after = self._suite(stmt.body, env)
                entry = _join(entry, after)
            if stmt.orelse is not None:
                entry = self._suite(stmt.orelse.body, entry)
            return entry
        if isinstance(stmt, cst.With):
            for item in stmt.items:
                env = self._unit(self._new_unit(item.item, stmt, "header"), env)
                if item.asname is not None:
                    for name in find_all(item.asname, cst.Name):
                        env.pop(name.value, None)
            return self._suite(stmt.body, env)
        if isinstance(stmt, cst.Try):
            env = self._suite(stmt.body, env)
            for handler in stmt.handlers:
                env = _join(env, self._suite(handler.body, env))
            if stmt.orelse is not None:
                env = self._suite(stmt.orelse.body, env)
            if stmt.finalbody is not None:
                env = self._suite(stmt.finalbody.body, env)
            return env
        # nested functions and classes, match, ...: never translated, but they may read names
        return self._unit(self._new_unit(stmt, stmt, "opaque"), env)

    def _bind_loop_target(self, stmt: cst.For, header: cst.BaseExpression,
                          env: dict[str, Val]) -> dict[str, Val]:
        outcome = self.outcomes.get(id(header))
        opaque = outcome is not None and outcome.numpyish and outcome.reason is not None
        for name in find_all(stmt.target, cst.Name):
            if opaque:
                env[name.value] = Val(OPAQUE, line=self._line(stmt))
            else:
                env.pop(name.value, None)
        return env

    def _unit(self, unit: Unit, env: dict[str, Val]) -> dict[str, Val]:
        node = unit.node
        key = id(node)
        self.units[key] = unit
        uses = numpy_uses(node, self.bindings, self.imports)
        self.uses[key] = uses
        reads = _reads(node)
        flagged = {n: env[n] for n in reads if n in env and (env[n].kind in FLAGGED
                                                              or env[n].strong)}
        numpyish = bool(uses) or any(v.kind in FLAGGED for v in flagged.values())
        targets = bound_names(node) if unit.kind == "small" else set()
        if not numpyish and not flagged:
            for name in targets:
                env.pop(name, None)
            return env
        outcome = Outcome(numpyish=numpyish)
        bound: dict[str, Val] = {}
        if not unit.compiled:
            outcome.reason = "only runs in eager mode"
        elif key in self.refused:
            outcome.reason = self.refused[key]
        else:
            self.env, self.outcome = env, outcome
            self.use_ids = {id(u.node) for u in uses}
            self.flag_names = set(flagged)
            self.unit_line = 0
            self.unit = unit
            self.typer.env = {**self.base_env,
                              **{n: type_string(v) for n, v in env.items()}}
            try:
                new, bound = self._translate(unit)
                outcome.node = new
            except Refuse as refusal:
                outcome.reason = str(refusal)
                outcome.names, outcome.notes = [], []
        self.outcomes[key] = outcome
        if outcome.reason is None:
            for name in targets:
                env.pop(name, None)
            for name, value in bound.items():
                if value.kind in (ARRAY, SCALAR0) or value.strong:
                    value = replace(value, origins=frozenset({key}))
                env[name] = value
            return env
        # Left as it is: whatever it reads keeps being numpy.
        for name, value in flagged.items():
            if value.kind in (ARRAY, SCALAR0, OPAQUE) or numpyish:
                why = outcome.reason
                for origin in value.origins:
                    if origin != key:
                        self.conflicts.setdefault(
                            origin, f"`{name}` would become a Tensor, but line "
                                    f"{self._line(unit.owner)} still uses it as numpy ({why})")
        for name in targets:
            if numpyish:
                origins = frozenset(o for v in flagged.values() for o in v.origins)
                env[name] = Val(OPAQUE, origins=origins, line=self._line(unit.owner))
            else:
                env.pop(name, None)
        return env

    def _translate(self, unit: Unit) -> tuple[cst.CSTNode | None, dict[str, Val]]:
        node = unit.node
        bound: dict[str, Val] = {}
        if unit.kind == "header":
            assert isinstance(node, cst.BaseExpression)
            result = self.expr(node)
            owner = unit.owner
            if result.val.kind == ARRAY:
                what = ("iterates over" if isinstance(owner, cst.For) else "tests")
                raise Refuse(f"{what} a numpy array")
            if isinstance(owner, cst.For) and result.val.kind in (SCALAR0, LITERAL):
                raise Refuse("iterates over numpy values")
            if isinstance(owner, cst.With):
                raise Refuse("numpy in a `with` item")
            if not result.changed:
                return None, bound
            return self._parse_expression(result.code, node), bound
        if unit.kind != "small":
            raise Refuse("numpy inside a nested function or class")
        code = self._small(node, bound)
        if code is None or code == code_of(node).rstrip().rstrip(";").rstrip():
            return None, bound
        try:
            line = cst.parse_statement(code + "\n")
        except cst.ParserSyntaxError as exc:
            raise Refuse(f"internal: the translation does not parse ({code!r})") from exc
        assert isinstance(line, cst.SimpleStatementLine)
        new = line.body[0]
        if isinstance(node, cst.BaseSmallStatement):
            new = new.with_changes(semicolon=node.semicolon)
        return new, bound

    def _parse_expression(self, code: str, node: cst.BaseExpression) -> cst.BaseExpression:
        try:
            return cst.parse_expression(code)
        except cst.ParserSyntaxError as exc:
            raise Refuse(f"internal: the translation does not parse ({code!r})") from exc

    def _small(self, node: cst.CSTNode, bound: dict[str, Val]) -> str | None:
        if isinstance(node, cst.Assign):
            value = self.expr(node.value)
            targets = [self._target(t.target, value, bound) for t in node.targets]
            if not value.changed and not any(changed for _, changed in targets):
                return None
            return "".join(f"{code} = " for code, _ in targets) + value.code
        if isinstance(node, cst.AnnAssign):
            if node.value is None:
                raise Refuse("an annotation of a numpy name")
            value = self.expr(node.value)
            if value.val.kind in (ARRAY, SCALAR0):
                raise Refuse("an annotated numpy array")
            target, changed = self._target(node.target, value, bound)
            if not value.changed and not changed:
                return None
            return f"{target}: {code_of(node.annotation.annotation)} = {value.code}"
        if isinstance(node, cst.AugAssign):
            return self._augmented(node, bound)
        if isinstance(node, cst.Return):
            if node.value is None:
                return None
            value = self.expr(node.value)
            if holds_array(value.val):
                raise Refuse("returns a numpy array: translating it would return a Tensor")
            return f"return {value.code}" if value.changed else None
        if isinstance(node, cst.Expr):
            value = self.expr(node.value)
            return value.code if value.changed else None
        if isinstance(node, cst.Assert):
            test = self.expr(node.test)
            msg = self.expr(node.msg) if node.msg is not None else None
            if holds_array(test.val):
                raise Refuse("asserts on a numpy array")
            if not test.changed and not (msg and msg.changed):
                return None
            return f"assert {test.code}" + (f", {msg.code}" if msg else "")
        raise Refuse(f"numpy in a `{code_of(node).split()[0]}` statement")

    def _target(self, target: cst.BaseExpression, value: Expr,
                bound: dict[str, Val]) -> tuple[str, bool]:
        if isinstance(target, cst.Name):
            val = value.val
            if val.kind == LITERAL:
                if any(holds_array(item) for item in val.items):
                    raise Refuse("a tuple of numpy arrays")
                val = UNKNOWN_VAL
            bound[target.value] = val
            return code_of(target), False
        if isinstance(target, cst.Tuple | cst.List):
            names = [e.value for e in target.elements]
            if value.val.kind == LITERAL and len(value.val.items) == len(names):
                items: Sequence[Val] = value.val.items
            elif value.val.kind == OTHER and value.val.typ == "List[int]":
                items = [Val(NUM, "int")] * len(names)
            elif holds_array(value.val):
                raise Refuse("unpacks a numpy array")
            else:
                items = [UNKNOWN_VAL] * len(names)
            changed = False
            for element, item in zip(names, items, strict=True):
                if isinstance(element, cst.Name):
                    bound[element.value] = item
                elif holds_array(item):
                    raise Refuse("unpacks numpy values into something other than names")
            return code_of(target), changed
        if isinstance(target, cst.Subscript):
            base = self.expr(target.value)
            if base.val.kind == ARRAY and base.val.alias:
                raise Refuse(f"writes into `{base.code}`, which may share memory with the "
                              "array it was cast from (numpy's astype copies)")
            if base.val.kind not in (ARRAY, TENS) and base.val.kind in FLAGGED:
                raise Refuse(f"writes into `{base.code}`")
            if base.val.kind == TENS or base.val.kind == ARRAY:
                if value.val.kind == TENS and base.val.kind == ARRAY:
                    raise Refuse("stores a Tensor into a numpy array")
                if value.val.kind not in (ARRAY, SCALAR0, NUM, TENS):
                    raise Refuse(f"cannot tell the type of `{value.code}`")
            elif holds_array(value.val):
                raise Refuse(f"stores a numpy array into `{base.code}`")
            index, changed = self._indices(target, base)
            code = f"{atom(base)}[{index}]" if changed or base.changed else code_of(target)
            return code, changed or base.changed
        if isinstance(target, cst.Attribute):
            if holds_array(value.val):
                raise Refuse("stores a numpy array on an attribute")
            base = self.expr(target.value)
            return (code_of(target) if not base.changed else
                    f"{atom(base)}.{target.attr.value}"), base.changed
        raise Refuse("an unusual assignment target")

    def _augmented(self, node: cst.AugAssign, bound: dict[str, Val]) -> str | None:
        op = code_of(node.operator).strip()[:-1]
        target = self.expr(node.target)
        value = self.expr(node.value)
        if target.val.kind in (ARRAY, SCALAR0):
            if target.val.alias:
                raise Refuse(f"writes into `{target.code}`, which may share memory with the "
                              "array it was cast from (numpy's astype copies)")
            self.promote([target, value], f"`{code_of(node)}`", op=op, in_place=True)
        elif value.val.kind in (ARRAY, SCALAR0):
            raise Refuse(f"`{code_of(node)}` mixes a numpy array into a "
                          f"{target.val.kind} in place")
        if isinstance(node.target, cst.Name):
            current = self.env.get(node.target.value)
            if current is not None:
                bound[node.target.value] = current
        if not target.changed and not value.changed:
            return None
        return f"{target.code} {op}= {value.code}"


def _reads(node: cst.CSTNode) -> set[str]:
    """Names ``node`` reads: not attribute names, keyword names or plain assignment targets."""
    skip: set[int] = set()
    for attribute in find_all(node, cst.Attribute):
        skip.add(id(attribute.attr))
    for arg in find_all(node, cst.Arg):
        if arg.keyword is not None:
            skip.add(id(arg.keyword))
    for target in find_all(node, cst.AssignTarget, cst.AnnAssign):
        inner = target.target
        for name in ([inner] if isinstance(inner, cst.Name) else
                     [e.value for e in inner.elements] if isinstance(inner, cst.Tuple | cst.List)
                     else []):
            if isinstance(name, cst.Name):
                skip.add(id(name))
    return {n.value for n in find_all(node, cst.Name) if id(n) not in skip}
