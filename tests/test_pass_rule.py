"""One pass rule in one module (parity.judge.pass_rule): no other module of the package
writes `atol + rtol * |ref|` in code, and the verdict's count, the re-judge profile, the
element views and the chunked hot loop decide every element alike."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from parity.judge.compare import compare_outputs
from parity.judge.exact_ints import exact_diff
from parity.judge.pass_rule import (
    allowed,
    element_mismatch,
    exact_int_mismatch,
    exceeds,
    one_sided,
)
from parity.judge.ratio import element_errors
from parity.tolerances import Tolerance

ROOT = Path(__file__).resolve().parents[1]


def _mentions(node: ast.AST, word: str) -> bool:
    names = (n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in ast.walk(node))
    return any(word in name for name in names)


def rule_written_out(tree: ast.AST) -> list[int]:
    """Lines of `atol + rtol * x` (either order of either operation) in code."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
            continue
        for this, other in ((node.left, node.right), (node.right, node.left)):
            product = isinstance(other, ast.BinOp) and isinstance(other.op, ast.Mult)
            if product and _mentions(this, "atol") and _mentions(other, "rtol"):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_pass_rule_is_written_in_one_module():
    found = []
    for top in ("core", "pages"):
        for path in sorted((ROOT / top).rglob("*.py")):
            lines = rule_written_out(ast.parse(path.read_text(encoding="utf-8")))
            found += [f"{path.relative_to(ROOT)}:{n}" for n in lines]
    assert len(found) == 1 and found[0].startswith("core/judge/pass_rule.py:"), found


def test_the_scan_finds_the_rule_written_out():
    tree = ast.parse("fail = d > tol.atol + tol.rtol * np.abs(r)\nband = rtol * x + atol\n")
    assert rule_written_out(tree) == [1, 2]


def _pairs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(5000).astype(np.float32)
    onnx = ref + (rng.standard_normal(5000) * 1e-4).astype(np.float32)
    onnx[::97] = ref[::97] * np.float32(1.01)  # some near the rtol line
    ref[:6] = [np.nan, np.nan, np.inf, np.inf, -np.inf, 1.0]
    onnx[:6] = [np.nan, 1.0, np.inf, -np.inf, 3.0, np.nan]
    return ref, onnx


@pytest.mark.parametrize(("atol", "rtol"), [(1e-5, 0.0), (1e-4, 1e-2), (0.0, 0.0), (3e-4, 0.0)])
def test_the_verdict_the_profile_and_the_element_views_agree(atol, rtol):
    ref, onnx = _pairs()
    tol = Tolerance(atol=atol, rtol=rtol)
    c = compare_outputs(ref, onnx, name="y", input_set=0, tolerance=tol, chunk_elements=512)
    _, _, fails = element_mismatch(ref, onnx, atol, rtol)
    _, ratio, view_fails = element_errors(ref, onnx, tol)
    assert c.n_mismatch == int(fails.sum()) == int(view_fails.sum())
    assert bool((ratio > 1.0).sum() == fails.sum())
    assert c.profile is not None
    assert c.profile.n_mismatch(tol) == c.n_mismatch
    # NaN both sides and equal Inf pass; one-sided NaN/Inf and opposite Infs fail
    assert fails[:6].tolist() == [False, True, False, True, True, True]


def test_one_sided_counts_nan_and_inf_apart():
    ref = np.array([np.nan, np.nan, np.inf, np.inf, 1.0, -np.inf])
    onnx = np.array([np.nan, 2.0, np.inf, -np.inf, np.inf, np.nan])
    nan_mm, inf_mm = one_sided(ref, onnx)
    assert nan_mm.tolist() == [False, True, False, False, False, True]
    assert inf_mm.tolist() == [False, False, False, True, True, False]


def test_the_compiled_loop_decides_as_the_rule():
    """The comparison's compiled loop compiles the rule's own functions: one element at a
    time they decide as numpy does over arrays (errors on and beside the line included)."""
    from numba import njit

    from parity.judge.compare_kernel import _allowed, _one_sided  # the rule, compiled

    @njit
    def loop(d, r, atol, rtol, x, y):  # type: ignore[no-untyped-def]
        fails = np.empty(d.size, dtype=np.bool_)
        nan_mm = np.empty(x.size, dtype=np.bool_)
        inf_mm = np.empty(x.size, dtype=np.bool_)
        for i in range(d.size):
            fails[i] = d[i] > _allowed(r[i], atol, rtol)
        for i in range(x.size):
            a, b = x[i], y[i]
            nan_mm[i], inf_mm[i] = _one_sided(
                np.isnan(a), np.isnan(b), np.isinf(a), np.isinf(b), a == b
            )
        return fails, nan_mm, inf_mm

    rng = np.random.default_rng(1)
    r = np.abs(rng.standard_normal(1000))
    values = [0.0, 1.0, -1.0, np.nan, np.inf, -np.inf]
    x, y = (np.array([v for v in values for _ in values]), np.array(values * len(values)))
    for atol, rtol in ((0.5, 0.0), (0.1, 0.7)):
        d = np.concatenate([np.abs(rng.standard_normal(1000)), allowed(r, atol, rtol)])
        rr = np.concatenate([r, r])
        fails, nan_mm, inf_mm = loop(d, rr, atol, rtol, x, y)
        assert np.array_equal(fails, exceeds(d, rr, atol, rtol))
        assert [nan_mm.tolist(), inf_mm.tolist()] == [a.tolist() for a in one_sided(x, y)]


def test_integers_are_decided_without_rounding():
    ref = np.array([2**60, 2**60, 5, -7], dtype=np.int64)
    onnx = np.array([2**60 + 1, 2**60, 6, -7], dtype=np.int64)
    mag, _, absref = exact_diff(ref, onnx)
    assert exact_int_mismatch(mag, absref, 0.0, 0.0).tolist() == [True, False, True, False]
    assert exact_int_mismatch(mag, absref, 1.0, 0.0).tolist() == [False] * 4
    _, _, fails = element_mismatch(ref, onnx, 0.0, 0.0)
    assert fails.tolist() == [True, False, True, False]


def test_the_rule_is_worded_once() -> None:
    """The sentence every front shows comes from parity.judge.pass_rule (RULE_TEXT,
    RULE_SENTENCE, ALLOWED_TEXT): no module spells the inequality again."""
    root = Path(__file__).resolve().parents[1]
    spelled = re.compile(r"\|(onnx|ONNX)\s*[-−]\s*(ref|reference)\|\s*(<=|≤)")
    found = [
        str(p.relative_to(root))
        for p in [*(root / "core").rglob("*.py"), *(root / "pages").glob("*.py")]
        if p.name != "pass_rule.py" and spelled.search(_code_only(p.read_text(encoding="utf-8")))
    ]
    assert found == []


def _code_only(text: str) -> str:
    """The text without docstrings and comments (docs may state the rule)."""
    import io
    import tokenize

    tree = ast.parse(text)
    docs = {
        node.body[0].value.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    kept = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start[0] in docs):
            continue
        kept.append(tok.string)
    return " ".join(kept)
