"""Symbolic-shape expressions of a ``.pt2`` built into sympy without evaluating any text.

torch.export.save writes each symbolic size as ``sympy.srepr`` text
(``Mul(Integer(4), Symbol('s27', positive=True, integer=True))``) and torch.export.load gives
that text to ``sympy.sympify``, which ``eval``s it. Here the text is parsed with ``ast`` and
each node built by hand from a fixed table of sympy / torch classes; anything else (an
attribute, a subscript, an unknown name, a keyword that is not an assumption) is refused, and
numbers are bounded so that a crafted ``Pow`` cannot take the machine. The loader then hands
torch the built object, which ``sympify`` returns unchanged.

Bounds, checked on the text's syntax tree before sympy sees any of it (`_precheck`), then on
every value built: at most MAX_CHARS characters and MAX_DEPTH nested calls or operators; an
integer literal, and every number built (Integer, a Rational's parts, a Float's magnitude),
within 2**4096; a Float literal of at most 100 significant digits and a decimal exponent of
at most 1000 (mpmath takes minutes, holding the GIL, for ``Float('1e10000000')``, and
``floor`` of ``Float('1e1000000000')`` is a billion-digit integer); a power's or a shift's
exponent a number of at most 64. Each step sympy takes on such values is short, so no single
call holds the GIL for long and a timeout's watchdog thread can always run.

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

from parity.errors import ExpressionError

MAX_CHARS = 4000
MAX_DEPTH = 100  # nested calls / operators (a deep conv stack nests a few per layer)
_MAX_BITS = 4096  # an integer (or a Rational's parts, a Float's magnitude) past this is no shape
_MAX_EXPONENT = 64
_MAX_FLOAT_DIGITS = 100  # a 256-bit precision Float needs 78
_MAX_FLOAT_EXPONENT = 1000  # |decimal exponent| of a Float literal; 2**4096 is about 1e1233
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
    trees = {text: _parse(text) for text in texts}  # every text checked before any is built
    symbols: dict[str, sympy.Symbol] = {}
    for text, tree in trees.items():
        _build(text, tree, symbols)
    return {text: _build(text, tree, symbols) for text, tree in trees.items()}


def parse_expression(text: Any, symbols: MutableMapping[str, sympy.Symbol]) -> Any:
    """The sympy object `text` spells; Symbol(...) declarations are added to `symbols`."""
    return _build(text, _parse(text), symbols)


def _parse(text: Any) -> ast.expr:
    """The syntax tree of `text`, its size, depth and literals checked (`_precheck`)."""
    try:
        if not isinstance(text, str) or len(text) > MAX_CHARS:
            raise ExpressionError(f"not a text of at most {MAX_CHARS} characters")
        try:
            tree = ast.parse(text, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise ExpressionError("not an expression") from exc
        _precheck(tree.body)
    except ExpressionError as exc:
        exc.text = text if isinstance(text, str) else repr(text)
        raise
    return tree.body


def _precheck(root: ast.expr) -> None:
    """Depth and literals, before sympy sees anything: an iterative walk of the tree."""
    stack: list[tuple[ast.AST, int]] = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Tuple)):
            depth += 1
            if depth > MAX_DEPTH:
                raise ExpressionError(f"nested more than {MAX_DEPTH} deep")
        if isinstance(node, ast.Constant) and type(node.value) is int:
            _int(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name == "Float" and node.args and isinstance(node.args[0], ast.Constant):
                _float_literal(node.args[0].value)
            elif name in _POWERS and len(node.args) == 2:
                _literal_exponent(name, node.args[1])
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            _literal_exponent("**", node.right)
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))


def _float_literal(value: Any) -> None:
    if type(value) is int:
        _int(value)
    elif isinstance(value, str):
        match = _FLOAT_TEXT.fullmatch(value)
        if not match:
            raise ExpressionError(f"Float text {value[:40]!r} is not a number")
        digits = len(match.group(1).replace(".", "").lstrip("0"))
        exponent = match.group(2)
        if digits > _MAX_FLOAT_DIGITS:
            raise ExpressionError(f"Float text has {digits} digits, over {_MAX_FLOAT_DIGITS}")
        if exponent and abs(int(exponent[1:][:12])) > _MAX_FLOAT_EXPONENT:
            raise ExpressionError(
                f"Float text exponent {exponent[1:][:12]} is past {_MAX_FLOAT_EXPONENT}"
            )


def _literal_exponent(name: str, node: ast.AST) -> None:
    """A power's literal exponent is checked here; a built one in _Builder."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("Integer", "Float", "Rational")
        and node.args
    ):
        node = node.args[0]
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int | float) and abs(value) > _MAX_EXPONENT:
        raise ExpressionError(f"{name} exponent {str(value)[:20]} is too large")


def _build(text: str, tree: ast.expr, symbols: MutableMapping[str, sympy.Symbol]) -> Any:
    try:
        return _checked_build(tree, symbols)
    except ExpressionError as exc:
        exc.text = text
        raise


def _checked_build(tree: ast.expr, symbols: MutableMapping[str, sympy.Symbol]) -> Any:
    try:
        return _Builder(symbols).build(tree)
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
            _exponent(name, args[1])
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
        if type(value) not in (str, int, float):
            raise ExpressionError("Float takes one number")
        _float_literal(value)  # also checked before anything was built (_precheck)
        precision = {}
        for kw in node.keywords:
            p = kw.value.value if isinstance(kw.value, ast.Constant) else None
            if kw.arg != "precision" or type(p) is not int or not 1 <= p <= 256:
                raise ExpressionError("Float takes only a precision up to 256 bits")
            precision["precision"] = p
        return _bounded(sympy.Float(value, **precision))

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
            _exponent("**", right)
            return _bounded(left**right)
        raise ExpressionError(f"operator {type(node.op).__name__} is not allowed")


def _literal_int(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        node = node.operand
    return isinstance(node, ast.Constant) and type(node.value) is int


def _int(value: int) -> int:
    if abs(value).bit_length() > _MAX_BITS:
        raise ExpressionError(f"an integer of {abs(value).bit_length()} bits is past {_MAX_BITS}")
    return value


def _exponent(name: str, exponent: Any) -> None:
    """A power or a shift by a number past 64 (or by a symbol, which a hint could make any
    size) is no shape arithmetic."""
    if not getattr(exponent, "is_Number", False):
        raise ExpressionError(f"{name} exponent {str(exponent)[:40]} is not a number")
    if not abs(exponent) <= _MAX_EXPONENT:
        raise ExpressionError(f"{name} exponent {str(exponent)[:40]} is too large")


def _bounded(value: Any) -> Any:
    """Refuse numbers no shape has: they are how a crafted expression would take memory."""
    if isinstance(value, sympy.Rational):
        _int(int(value.p))
        _int(int(value.q))
    elif isinstance(value, sympy.Float):
        _sign, mantissa, exponent, bits = value._mpf_
        if mantissa and not -_MAX_BITS <= exponent + bits <= _MAX_BITS:
            raise ExpressionError(f"Float of magnitude 2**{exponent + bits} is past 2**{_MAX_BITS}")
    return value
