"""Symbolic-shape expressions of a ``.pt2`` built into sympy without evaluating any text.

torch.export.save writes each symbolic size as ``sympy.srepr`` text
(``Mul(Integer(4), Symbol('s27', positive=True, integer=True))``) and torch.export.load gives
that text to ``sympy.sympify``, which ``eval``s it. Here the text is parsed with ``ast`` and
each node built by hand from a fixed table of sympy / torch classes; anything else (an
attribute, a subscript, an unknown name, a keyword that is not an assumption) is refused, and
numbers are bounded so that a crafted ``Pow`` cannot take the machine. The loader then hands
torch the built object, which ``sympify`` returns unchanged.

Contract: parse_expressions(texts) -> {text: sympy object}; parse_expression(text, symbols);
both raise ExpressionError (one line) for anything else.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

import sympy

MAX_CHARS = 4000
_MAX_BITS = 4096  # an integer (or a Rational's parts) past this is not a shape
_MAX_EXPONENT = 64
_SYMBOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")
_ASSUMPTIONS = frozenset(
    ("positive", "negative", "nonnegative", "nonpositive", "integer", "real", "finite")
    + ("zero", "nonzero", "commutative", "extended_real", "rational")
)

# The names torch's own deserializer gives sympify (torch/_export/serde/serialize.py), plus
# the opaque unary and bitwise functions its shape environment writes.
_TORCH = frozenset(
    ("FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt")
    + ("FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv")
    + ("IntTrueDiv", "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt")
    + ("RoundToInt", "RoundDecimal", "ToFloat", "Identity")
)
_SYMPY = (
    ("Integer", "Rational", "Add", "Mul", "Pow", "Max", "Min", "Abs", "floor", "ceiling")
    + ("sqrt", "Piecewise", "Equality", "Unequality", "StrictLessThan", "LessThan")
    + ("StrictGreaterThan", "GreaterThan", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not")
)
_POWERS = frozenset({"Pow", "PowByNatural", "FloatPow", "LShift", "RShift"})


class ExpressionError(ValueError):
    """An expression that is not plain symbolic-shape arithmetic."""


@functools.cache
def _functions() -> dict[str, Callable[..., Any]]:
    from sympy.functions.elementary.piecewise import ExprCondPair
    from torch.utils._sympy import functions as torch_fns

    table: dict[str, Callable[..., Any]] = {n: getattr(sympy, n) for n in _SYMPY}
    table["ExprCondPair"] = ExprCondPair
    for name in dir(torch_fns):
        if name in _TORCH or name.startswith(("OpaqueUnaryFn_", "BitwiseFn_")):
            table[name] = getattr(torch_fns, name)
    return table


_CONSTANT_VALUES: dict[str, Any] = {"oo": sympy.oo, "zoo": sympy.zoo, "nan": sympy.nan}
_CONSTANT_VALUES.update({"true": sympy.true, "True": sympy.true})
_CONSTANT_VALUES.update({"false": sympy.false, "False": sympy.false})


def parse_expressions(texts: Iterable[str]) -> dict[str, Any]:
    """text -> sympy object for every expression of one archive. Two passes: a bare symbol
    name (older torch's str() form) means the Symbol(...) declared with that name anywhere."""
    texts = list(dict.fromkeys(texts))
    symbols: dict[str, sympy.Symbol] = {}
    for text in texts:
        parse_expression(text, symbols)
    return {text: parse_expression(text, symbols) for text in texts}


def parse_expression(text: Any, symbols: MutableMapping[str, sympy.Symbol]) -> Any:
    """The sympy object `text` spells; Symbol(...) declarations are added to `symbols`."""
    if not isinstance(text, str) or len(text) > MAX_CHARS:
        raise ExpressionError("not a short text")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError("not an expression") from exc
    try:
        return _Builder(symbols).build(tree.body)
    except RecursionError as exc:
        raise ExpressionError("nested too deeply") from exc
    except ExpressionError:
        raise
    except (TypeError, ValueError, ArithmeticError, AttributeError) as exc:
        # a whitelisted constructor refusing its arguments (e.g. Integer(1.5))
        raise ExpressionError(f"{type(exc).__name__} building it") from exc


class _Builder:
    def __init__(self, symbols: MutableMapping[str, sympy.Symbol]) -> None:
        self.symbols = symbols

    def build(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return _bounded(sympy.Integer(_int(node.value)))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = self.build(node.operand)
            return _bounded(-value if isinstance(node.op, ast.USub) else value)
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Tuple):
            return tuple(self.build(e) for e in node.elts)
        raise ExpressionError(f"{type(node).__name__} is not allowed")

    def _name(self, name: str) -> Any:
        if name in _CONSTANT_VALUES:
            return _CONSTANT_VALUES[name]
        if name in self.symbols:
            return self.symbols[name]
        if _SYMBOL_NAME.fullmatch(name) and not name.startswith("__") and name not in _functions():
            return sympy.Symbol(name)  # older torch's str() form, declared nowhere
        raise ExpressionError(f"name {name[:40]!r} is not a symbol")

    def _call(self, node: ast.Call) -> Any:
        if not isinstance(node.func, ast.Name):
            raise ExpressionError("only named functions may be called")
        name = node.func.id
        if name == "Symbol":
            return self._symbol(node)
        if name == "Float":
            return self._float(node)
        if name in ("Integer", "Rational") and (
            node.keywords or not all(_literal_int(a) for a in node.args)
        ):
            raise ExpressionError(f"{name} takes integers")
        function = _functions().get(name)
        if function is None:
            raise ExpressionError(f"function {name[:40]!r} is not allowed")
        if node.keywords:
            raise ExpressionError(f"{name} takes no keywords")
        args = [self.build(a) for a in node.args]
        if name in _POWERS and len(args) == 2:
            exponent = args[1]
            if getattr(exponent, "is_Number", False) and abs(exponent) > _MAX_EXPONENT:
                raise ExpressionError(f"{name} exponent {exponent} is too large")
        return _bounded(function(*args))

    def _symbol(self, node: ast.Call) -> sympy.Symbol:
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
            raise ExpressionError("Symbol takes one name")
        name = node.args[0].value
        if not (isinstance(name, str) and _SYMBOL_NAME.fullmatch(name)) or name.startswith("__"):
            raise ExpressionError(f"symbol name {str(name)[:40]!r} is not a plain name")
        assumptions = {}
        for kw in node.keywords:
            if kw.arg not in _ASSUMPTIONS or not (
                isinstance(kw.value, ast.Constant) and type(kw.value.value) is bool
            ):
                raise ExpressionError(f"Symbol keyword {str(kw.arg)[:40]!r} is not an assumption")
            assumptions[kw.arg] = kw.value.value
        symbol = sympy.Symbol(name, **assumptions)
        self.symbols.setdefault(name, symbol)
        return symbol

    def _float(self, node: ast.Call) -> sympy.Float:
        if len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
            raise ExpressionError("Float takes one number")
        value = node.args[0].value
        if isinstance(value, str):
            if not _FLOAT_TEXT.fullmatch(value):
                raise ExpressionError(f"Float text {value[:40]!r} is not a number")
        elif type(value) not in (int, float):
            raise ExpressionError("Float takes one number")
        precision = {}
        for kw in node.keywords:
            p = kw.value.value if isinstance(kw.value, ast.Constant) else None
            if kw.arg != "precision" or type(p) is not int or not 1 <= p <= 256:
                raise ExpressionError("Float takes only a precision up to 256 bits")
            precision["precision"] = p
        return sympy.Float(value, **precision)

    def _binop(self, node: ast.BinOp) -> Any:
        left, right = self.build(node.left), self.build(node.right)
        if isinstance(node.op, ast.Add):
            return _bounded(left + right)
        if isinstance(node.op, ast.Sub):
            return _bounded(left - right)
        if isinstance(node.op, ast.Mult):
            return _bounded(left * right)
        if isinstance(node.op, ast.Div):
            return _bounded(left / right)
        if isinstance(node.op, ast.Pow):
            if getattr(right, "is_Number", False) and abs(right) > _MAX_EXPONENT:
                raise ExpressionError(f"exponent {right} is too large")
            return _bounded(left**right)
        raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")


def _literal_int(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _int(value: int) -> int:
    if abs(value).bit_length() > _MAX_BITS:
        raise ExpressionError("integer too large")
    return value


def _bounded(value: Any) -> Any:
    """Refuse numbers no shape has: they are how a crafted expression would take memory."""
    if isinstance(value, sympy.Rational):
        _int(int(value.p))
        _int(int(value.q))
    return value
