"""Ordinary dynamic-shape .pt2 files load through the restricted reader (issue 9).

Each archive is a real torch.export.save of a model with dynamic dims; the restricted reader
must give the same program as torch.export.load (range constraints, outputs at a size other
than the export's) while building every symbolic expression without eval. Crafted
expressions are refused with one line and run nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import pytest
import sympy
import torch
from torch import nn
from torch.export import Dim
from torch.utils._pytree import tree_leaves

from parity.errors import ModelLoadError
from parity.load.pt2_archive import load_pt2
from parity.load.pt2_sympy import ExpressionError, parse_expression


class Cat(nn.Module):
    def forward(self, x, y):  # y's batch is derived: 2 * x's
        return torch.cat([x, y], 0).sum(-1)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).reshape(-1)


class Resize(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x):  # interpolate by a factor: Float(...) and ToFloat in the shapes
        y = self.conv(x)
        return nn.functional.interpolate(y, scale_factor=0.5), y[:, :, : y.shape[2] // 2]


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        import transformers

        config = transformers.BertConfig(
            vocab_size=64,
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=64,
        )
        torch.manual_seed(0)
        self.bert = transformers.BertModel(config).eval()

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _ids(batch: int, seq: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(batch * 100 + seq)
    ids = torch.randint(0, 64, (batch, seq), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


batch = Dim("batch", min=2, max=64)
seq = Dim("seq", min=2, max=60)
CASES = {
    "derived_dim": (
        Cat,
        lambda n: ((torch.randn(n, 3), torch.randn(2 * n, 3)), {}),
        {"x": {0: batch}, "y": {0: 2 * batch}},
    ),
    "min_max_dims": (
        Mlp,
        lambda n: ((torch.randn(n, n + 2, 8),), {}),
        {"x": {0: Dim("b", min=1, max=128), 1: Dim("s", min=2, max=512)}},
    ),
    "auto_dims": (
        Mlp,
        lambda n: ((torch.randn(n, 2 * n, 8),), {}),
        {"x": {0: Dim.AUTO, 1: Dim.AUTO}},
    ),
    "float_scale": (
        Resize,
        lambda n: ((torch.randn(2, 3, 8 * n, 4 * n),), {}),
        ({0: Dim.AUTO, 2: Dim.AUTO, 3: Dim.AUTO},),
    ),
    "transformer_dynamic_seq": (
        Bert,
        lambda n: ((), _ids(2, 4 * n)),
        {"input_ids": {0: Dim.AUTO, 1: seq}, "attention_mask": {0: Dim.AUTO, 1: seq}},
    ),
}


def _expressions(path: Path) -> set[str]:
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith("models/model.json"))
        document = json.loads(archive.read(name))
    found: set[str] = set()
    stack: list = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.update(v for k, v in item.items() if k == "expr_str")
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dynamic")
    paths = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (cls, inputs, dynamic) in CASES.items():
            args, kwargs = inputs(3)
            program = torch.export.export(
                cls().eval(), args, kwargs, dynamic_shapes=dynamic, strict=False
            )
            paths[name] = root / f"{name}.pt2"
            torch.export.save(program, paths[name])
    return paths


@pytest.mark.parametrize("name", list(CASES))
def test_dynamic_archives_load_as_torch_loads_them(name, archives) -> None:
    path = archives[name]
    assert any(e.startswith(("Mul(", "Max(", "FloorDiv(", "Add(")) for e in _expressions(path))
    module, program = load_pt2(path)
    reference = torch.export.load(str(path))
    assert {str(k): (v.lower, v.upper) for k, v in program.range_constraints.items()} == {
        str(k): (v.lower, v.upper) for k, v in reference.range_constraints.items()
    }
    args, kwargs = CASES[name][1](5)  # not the export's size
    with torch.inference_mode():
        ours, theirs = module(*args, **kwargs), reference.module()(*args, **kwargs)
    assert [t.shape for t in tree_leaves(ours)] == [t.shape for t in tree_leaves(theirs)]
    pairs = zip(tree_leaves(ours), tree_leaves(theirs), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)


def test_no_expression_text_reaches_sympify(archives, monkeypatch) -> None:
    texts: list[str] = []
    real = sympy.sympify

    def recording(a, *args, **kwargs):
        if isinstance(a, str):
            texts.append(a)
        return real(a, *args, **kwargs)

    monkeypatch.setattr(sympy, "sympify", recording)
    load_pt2(archives["float_scale"])
    assert texts == []


CRAFTED = [
    "__import__('os').system('true')",
    "Symbol('s0').__class__",
    "Symbol('s0', **{'x': 1})",
    "Symbol('__class__')",
    "Symbol('s0', evaluate=print)",
    "Function('open')(Integer(1))",
    "Lambda(Symbol('s0'), Integer(1))",
    "(lambda: 0)()",
    "Integer(9)**Integer(9)**Integer(99)",
    "Pow(Integer(10), Integer(100000000))",
    "PowByNatural(Symbol('s0'), Integer(100000000))",
    "LShift(Integer(1), Integer(1000000000))",
    "Mul(Integer(" + "9" * 1300 + "), Integer(" + "9" * 1300 + "))",
    "Float('1e5; import os')",
    "Integer('12')",
    "[s0 for s0 in ()]",
    "s0.p",
    "Max(Integer(1), s0)[0]",
    "S.Integers",
    "sympify('1')",
    "x" * 5000,
]


@pytest.mark.parametrize("text", CRAFTED)
def test_crafted_expressions_are_refused(text: str) -> None:
    with pytest.raises(ExpressionError):
        parse_expression(text, {})


@pytest.mark.parametrize(
    "text",
    [
        "Mul(Integer(4), Symbol('s27', positive=True, integer=True))",
        "Max(Integer(1), TruncToInt(Mul(Float('0.5', precision=53), ToFloat(Symbol('s0')))))",
        "Piecewise(ExprCondPair(Integer(1), StrictLessThan(Symbol('s0'), Integer(5))), "
        "ExprCondPair(Integer(0), true))",
        "And(Equality(Mod(Symbol('u0', integer=True), Integer(4)), Integer(0)), "
        "Unequality(Symbol('u0', integer=True), Integer(1)))",
        "Pow(Symbol('s0', integer=True), Rational(1, 2))",
        "-oo",
        "2*s0 + FloorDiv(s0, 2)",
    ],
)
def test_what_sympy_writes_is_built_as_sympify_would(text: str) -> None:
    from sympy.functions.elementary.piecewise import ExprCondPair
    from torch.utils._sympy import functions as fns

    names = {n: getattr(fns, n) for n in ("FloorDiv", "Mod", "TruncToInt", "ToFloat")}
    assert parse_expression(text, {}) == sympy.sympify(
        text, locals={**names, "ExprCondPair": ExprCondPair}
    )


def test_a_crafted_expression_in_a_real_archive_is_refused_in_one_line(archives, tmp_path):
    src = archives["derived_dim"]
    dst = tmp_path / "pow.pt2"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("models/model.json"):
                text = next(iter(_expressions(src)))
                bomb = "Pow(Integer(10), Integer(100000000))"
                data = data.replace(json.dumps(text).encode(), json.dumps(bomb).encode())
            zout.writestr(info.filename, data)
    with pytest.raises(ModelLoadError, match="is not plain arithmetic") as caught:
        load_pt2(dst)
    assert "\n" not in str(caught.value) and str(dst) in str(caught.value)


def test_an_hf_model_output_archive_loads_in_a_fresh_process(tmp_path) -> None:
    """A .pt2 of a transformers model returns a ModelOutput: its pytree type registers when
    transformers' module is imported, which a plain `parity validate` had not done."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bert = Bert().bert
        program = torch.export.export(bert, (), _ids(2, 8), strict=False)
    path = tmp_path / "bert_output.pt2"
    torch.export.save(program, path)
    code = (
        "import sys; from parity.load.pt2_archive import load_pt2; "
        "assert 'transformers' not in sys.modules; "
        f"module, _ = load_pt2({str(path)!r}); "
        "ids = __import__('torch').zeros(2, 8, dtype=int); "
        "print(type(module(input_ids=ids, attention_mask=ids + 1)).__name__)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "BaseModelOutputWithPoolingAndCrossAttentions"
