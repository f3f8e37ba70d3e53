"""--layers on the files people ship: ONNX Runtime's transformers optimizer fuses a BERT into
EmbedLayerNormalization, Attention, SkipLayerNormalization and BiasGelu (the dense's bias
moves into the BiasGelu, so the MatMul before it is the Linear's output without its bias), a
GPT-2 into SkipLayerNormalization and FastGelu; the float16 converter then makes the fused
float16 file.

Tiny random-weight models (2 layers, hidden 32, 2 heads; every bias and LayerNorm weight
random too, so no two of them are equal and a moved bias changes the numbers) are exported by
Optimum and optimized once per module (`fused`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from parity.judge.noise_floor import is_rounding
from parity.layers.birth import matching_error
from parity.layers.result import LayersResult, LayerStatus, LayerValue, Outcome
from parity.pipeline import RunConfig, run_validation
from parity.results import FindingKind
from parity.run.hf_options import HfOptions
from tests.helpers.hf_models import PROMPTS, randomized

pytestmark = pytest.mark.slow  # exports and optimizes transformers models

HEADS, HIDDEN = 2, 32
BUG_MATMUL = "/encoder/layer.1/intermediate/dense/MatMul"


@dataclass(frozen=True)
class Fused:
    bert_dir: str
    bert: Path  # the optimizer's fused BERT
    bert_fp16: Path  # ... converted to float16 (inputs and outputs kept float32)
    gpt2_dir: str
    gpt2: Path


def _optimized(
    src: Path, dst: Path, model_type: str, heads: int = HEADS, hidden: int = HIDDEN
) -> onnx.ModelProto:
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(
        str(src), model_type=model_type, num_heads=heads, hidden_size=hidden, opt_level=1
    )
    opt.save_model_to_file(str(dst))
    return opt


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> Fused:
    import transformers
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from tests.helpers.hf_models import SPECIAL, save_model
    from tests.helpers.hf_tasks import optimum_export, save_text_model

    root = tmp_path_factory.mktemp("fused")
    config = transformers.BertConfig(
        vocab_size=96,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    bert_dir = save_text_model(randomized(transformers.BertModel(config)), root / "bert")
    raw = optimum_export(bert_dir, root / "bert_raw", "feature-extraction")
    bert = root / "bert_fused.onnx"
    opt = _optimized(raw, bert, "bert")
    ops = {n.op_type for n in opt.model.graph.node}
    assert {"Attention", "SkipLayerNormalization", "BiasGelu", "EmbedLayerNormalization"} <= ops
    fp16 = convert_float_to_float16(onnx.load(str(bert)), keep_io_types=True)
    bert_fp16 = root / "bert_fused_fp16.onnx"
    onnx.save(fp16, str(bert_fp16))

    gconfig = transformers.GPT2Config(
        vocab_size=96, n_embd=HIDDEN, n_layer=2, n_head=HEADS, n_positions=64, **SPECIAL
    )
    gpt2_dir = save_model(randomized(transformers.GPT2LMHeadModel(gconfig)), root / "gpt2")
    graw = optimum_export(gpt2_dir, root / "gpt2_raw", "text-generation-with-past")
    gpt2 = root / "gpt2_fused.onnx"
    gopt = _optimized(graw, gpt2, "gpt2")
    assert {"SkipLayerNormalization", "FastGelu"} <= {n.op_type for n in gopt.model.graph.node}
    return Fused(bert_dir, bert, bert_fp16, gpt2_dir, gpt2)


def _run(model_dir: str, onnx_path: Path, **kw):
    options = HfOptions(prompts=PROMPTS, max_new_tokens=2)
    return run_validation(
        RunConfig(model=f"hf:{model_dir}", onnx=str(onnx_path), hf=options, layers=True, **kw)
    )


def _scaled_column(src: Path, dst: Path, matmul: str, factor: float = 1.05) -> None:
    """`src` with one column (output feature 0) of `matmul`'s weight initializer scaled."""
    model = onnx.load(str(src))
    node = next(n for n in model.graph.node if n.name == matmul)
    tensor = next(t for t in model.graph.initializer if t.name == node.input[1])
    weight = numpy_helper.to_array(tensor).copy()
    weight[:, 0] *= factor
    tensor.CopyFrom(numpy_helper.from_array(weight, tensor.name))
    onnx.save(model, str(dst))


def test_clean_fused_bert_flags_nothing_and_lists_the_moved_biases(fused) -> None:
    run = _run(fused.bert_dir, fused.bert, noise_floor=True)
    _concludes_clean(run)  # what Parity concludes (the fused kernels round as they may)
    layers = run.layers
    assert layers is not None
    assert layers.first_divergence is None and not layers.confirmations
    by_module = {v.torch_module: v for v in layers.values}
    # each fused node is compared with the torch value it means
    assert by_module["embeddings"].onnx_op == "com.microsoft.EmbedLayerNormalization"
    assert by_module["encoder.layer.1.attention.self"].onnx_op == "com.microsoft.Attention"
    act = by_module["encoder.layer.0.intermediate.intermediate_act_fn"]
    assert (act.onnx_op, act.status) == ("com.microsoft.BiasGelu", "pass")
    norm = by_module["encoder.layer.0.output.LayerNorm"]
    assert (norm.onnx_op, norm.status) == ("com.microsoft.SkipLayerNormalization", "pass")
    # the MatMul whose bias moved into the BiasGelu: listed, not comparable, with why
    dense = by_module["encoder.layer.0.intermediate.dense"]
    assert dense.onnx_op == "MatMul" and dense.status == LayerStatus.NOT_COMPARABLE
    assert dense.reason is not None and "bias was moved into BiasGelu" in dense.reason
    assert (dense.error_ratio or 0) > 1e-3  # its numbers do differ: a bias is missing
    # what each fused node stands for: its module, the leaves fused into it, a bias it took
    attention = by_module["encoder.layer.1.attention.self"]
    assert {"encoder.layer.1.attention.self.query", "encoder.layer.1.attention.self.value"} <= set(
        attention.covers
    )
    assert "encoder.layer.0.intermediate.dense (bias)" in act.covers
    assert dense.covers == ()
    block = json.loads(json.dumps(run.layers.to_json()))
    statuses = {v["status"] for v in block["values"]}
    assert statuses == {"pass", "not_comparable"}
    assert LayersResult.from_json(block).values == layers.values  # reason, covers kept
    assert any("not comparable" in n for n in layers.notes)


def test_planted_bug_in_fused_layer_1_is_named_at_layer_1(fused, tmp_path) -> None:
    bug = tmp_path / "bug.onnx"
    _scaled_column(fused.bert, bug, BUG_MATMUL)
    run = _run(fused.bert_dir, bug)
    layers = run.layers
    first = layers.first_divergence
    assert first is not None, layers.notes
    assert first.torch_module == "encoder.layer.1.intermediate.intermediate_act_fn"
    assert first.onnx_op == "com.microsoft.BiasGelu"
    assert layers.confirmation_of(first).outcome == Outcome.BORN
    # nothing in layer 0 is flagged, and the MatMul itself is never judged
    assert not [
        v
        for v in layers.values
        if ".layer.0." in (v.torch_module or "") and v.status not in ("pass", "not_comparable")
    ]
    dense = next(v for v in layers.values if v.onnx_node == BUG_MATMUL)
    assert dense.status == LayerStatus.NOT_COMPARABLE


def test_fused_float16_bert_flags_no_confirmed_bug(fused) -> None:
    run = _run(fused.bert_dir, fused.bert_fp16)
    layers = run.layers
    assert layers is not None and layers.matched > 0
    assert not layers.with_outcome(Outcome.BORN), [
        (c.torch_module, c.onnx_op, c.max_abs) for c in layers.confirmations
    ]


def test_clean_fused_gpt2_flags_nothing(fused) -> None:
    """Clean is what Parity concludes, not a 1e-5 tolerance: the fused kernels' float32
    rounding (and torch's own: on an AVX-512/AMX Xeon its KV cache is 1.9e-5 from float64,
    ONNX Runtime's 2.8e-6) may exceed the default atol; against the float64 run every output's
    error is float32 noise, and nothing is a bug or a divergence."""
    run = _run(fused.gpt2_dir, fused.gpt2, noise_floor=True)
    _concludes_clean(run)
    layers = run.layers
    assert layers is not None and layers.matched > 0
    assert layers.first_divergence is None and not layers.confirmations
    assert not [v for v in layers.values if LayerStatus(v.status).born]


def _concludes_clean(run) -> None:
    """No bug, no divergence; every output's error measured against the float64 run is its
    precision's rounding, and a failing output is said to be rounding."""
    kinds = {f.kind for f in run.findings}
    assert not kinds & {FindingKind.BUG, FindingKind.DIVERGES, FindingKind.ERROR}, run.findings
    assert all(c.noise is not None and is_rounding(c.noise) for c in run.outputs), [
        (c.name, c.noise) for c in run.outputs
    ]
    failing = {c.name for c in run.outputs if not c.status.passed}
    rounding = {f.output for f in run.findings if f.kind is FindingKind.ROUNDING}
    assert failing == rounding


def _value(order: int, status: str, inputs: tuple[int, ...] = ()) -> LayerValue:
    return LayerValue(
        order=order,
        onnx_value=f"v{order}",
        onnx_node=f"n{order}",
        onnx_op="MatMul",
        torch_module=f"m{order}",
        torch_node=None,
        input_set=0,
        shape=(2,),
        max_abs=1.0,
        max_rel=1.0,
        scale=1.0,
        error_ratio=1.0,
        jump=10.0,
        cosine=1.0,
        status=status,
        inputs=inputs,
    )


def test_a_divergence_after_which_everything_agrees_is_a_matching_error() -> None:
    flagged = _value(1, "diverges", (0,))
    agreeing = [_value(0, "pass"), flagged, _value(2, "pass", (1,)), _value(3, "pass", (2,))]
    said = matching_error(flagged, agreeing)
    assert said is not None and said.startswith("matching error") and "'m1'" in said
    # an error passed on (carried), or nothing reading it: a divergence, tested alone
    carried = [*agreeing[:3], _value(3, "carried", (2,))]
    assert matching_error(flagged, carried) is None
    assert matching_error(flagged, [agreeing[0], flagged, _value(2, "pass", (0,))]) is None
    # a value not comparable after it is not judged either way
    unjudged = [*agreeing, _value(4, "not_comparable", (3,))]
    assert matching_error(flagged, unjudged) is not None


def test_layers_page_rows_show_what_a_fused_node_covers_and_why_a_value_is_not_compared() -> None:
    from dataclasses import replace

    from parity.dashboard.layers import value_rows

    fused_value = replace(
        _value(2, "pass"),
        onnx_op="com.microsoft.BiasGelu",
        covers=("m.act", "m.dense (bias)"),
    )
    moved = replace(_value(1, "not_comparable"), reason="fused: its bias was moved into BiasGelu")
    result = LayersResult(
        criterion="c",
        matching="module boundaries",
        matched=2,
        unmatched_onnx=0,
        unmatched_torch=0,
        first_divergence=None,
        values=(moved, fused_value),
    )
    rows = value_rows(result).set_index("order")
    assert rows.loc[2, "fused: covers"] == "m.act, m.dense (bias)"
    assert rows.loc[1, "not comparable"] == "fused: its bias was moved into BiasGelu"
    assert rows.loc[1, "status"] == "· not comparable"


def test_a_cut_that_makes_a_matched_value_itself_is_not_also_fed_it() -> None:
    """An Attention reads EmbedLayerNormalization's output (matched) and its mask index (not
    comparable): the cut takes the EmbedLayerNormalization node, so it makes the output
    itself rather than declaring it twice (ONNX Runtime: "Duplicate definition of name")."""
    from onnx import TensorProto, helper

    from parity.layers import confirm

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [
        helper.make_node("Split", ["x"], ["a0", "a1"], axis=0, num_outputs=2),
        helper.make_node("Add", ["a0", "a1"], ["y"]),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)]
    )
    selection = confirm.select(model, "y", {"x", "a0"})
    assert isinstance(selection, confirm.Selection)
    assert selection.inputs == ("x",) and selection.nodes == (0, 1)
    arrays = {"x": np.arange(4, dtype=np.float32)}
    cut = confirm.build(model, selection, arrays, np.zeros(2, np.float32))
    np.testing.assert_array_equal(confirm.run_cut(cut, arrays), [2.0, 4.0])


def test_olive_names_the_pooler_output_tanh_and_it_is_paired_not_missing(fused, tmp_path) -> None:
    """Olive's dynamo export names BERT's pooler output `tanh` (its last op): the hf: run
    pairs it with torch's `pooler_output` by order and shape, says so once, and passes."""
    import torch
    import transformers

    model = transformers.BertModel.from_pretrained(fused.bert_dir).eval()
    ids = torch.tensor([[2, 5, 6, 3]])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    path = tmp_path / "olive_like.onnx"
    torch.onnx.export(
        model,
        (ids, torch.ones_like(ids), torch.zeros_like(ids)),
        str(path),
        input_names=names,
        output_names=["last_hidden_state", "tanh"],
        dynamic_axes={**axes, "tanh": {0: "batch"}},
        dynamo=False,
        opset_version=17,
    )
    run = run_validation(
        RunConfig(model=f"hf:{fused.bert_dir}", onnx=str(path), hf=HfOptions(prompts=PROMPTS))
    )
    assert run.verdict == "pass"
    assert {(c.name, c.status.value) for c in run.outputs} == {
        ("last_hidden_state", "pass"),
        ("tanh", "pass"),
    }
    assert run.infos[0].notes == (
        "outputs named otherwise than torch's, paired by order and shape: "
        "ONNX 'tanh' is torch's 'pooler_output'",
    )
