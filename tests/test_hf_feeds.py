"""Mapping captured generate() calls onto ONNX inputs/outputs: pure numpy, no export."""

from __future__ import annotations

import numpy as np
import pytest

from parity.errors import InputError, UsageError
from parity.hf.capture import CapturedCall
from parity.hf.feeds import (
    cache_position,
    masked_positions,
    onnx_feeds,
    position_ids,
    reference_outputs,
)
from parity.hf.source import PADDING, logits_crop
from parity.pipeline import compare_case
from parity.results import InputSet, OutputSet
from parity.run.hf_options import (
    DEFAULT_PROMPT,
    HfOptions,
    options_from_text,
    parse_config_override,
    parse_config_overrides,
)
from parity.signature import OnnxSignature, TensorSpec
from parity.sources import Case
from parity.tolerances import Tolerance, Tolerances

B, H, D, VOCAB = 2, 2, 4, 10


def _call(*, past: int, seq: int, mask: np.ndarray | None, positions: bool = False) -> CapturedCall:
    rng = np.random.default_rng(past * 10 + seq)
    inputs: dict[str, np.ndarray] = {"input_ids": rng.integers(0, VOCAB, (B, seq))}
    if mask is not None:
        inputs["attention_mask"] = mask
    if positions:
        inputs["position_ids"] = np.full((B, seq), 7, dtype=np.int64)
    kv = [(rng.standard_normal((B, H, past, D), dtype=np.float32),) * 2 for _ in range(2)]
    present = [
        (rng.standard_normal((B, H, past + seq, D), dtype=np.float32),) * 2 for _ in range(2)
    ]
    return CapturedCall(
        index=0 if past == 0 else 1,
        inputs=inputs,
        past=tuple(kv),
        logits=rng.standard_normal((B, 1, VOCAB), dtype=np.float32),
        present=tuple(present),
        seconds=0.0,
    )


def _signature(input_names: list[str], dtypes: dict[str, str] | None = None) -> OnnxSignature:
    dtypes = dtypes or {}

    def spec(name: str) -> TensorSpec:
        default = "float32" if name.startswith("past") else "int64"
        return TensorSpec(name, dtypes.get(name, default), ())

    outputs = ["logits", "present.0.key", "present.0.value", "present.1.key", "present.1.value"]
    return OnnxSignature(
        inputs=tuple(spec(n) for n in input_names),
        outputs=tuple(TensorSpec(n, "float32", ()) for n in outputs),
        opset=18,
        producer="test",
        ir_version=10,
    )


OPTIMUM_INPUTS = [
    "input_ids",
    "attention_mask",
    "position_ids",
    "past_key_values.0.key",
    "past_key_values.0.value",
    "past_key_values.1.key",
    "past_key_values.1.value",
]
LEFT_PADDED = np.array([[0, 0, 1, 1], [1, 1, 1, 1]])


def test_prefill_feeds_empty_cache_as_zero_length_tensors():
    call = _call(past=0, seq=4, mask=LEFT_PADDED)
    feeds = onnx_feeds(call, _signature(OPTIMUM_INPUTS))
    assert feeds["past_key_values.1.value"].shape == (B, H, 0, D)
    assert call.phase == "prefill" and call.label == "step 1 · prefill"


def test_missing_mask_is_fed_as_ones_over_past_plus_current():
    call = _call(past=5, seq=1, mask=None)
    feeds = onnx_feeds(call, _signature(OPTIMUM_INPUTS))
    np.testing.assert_array_equal(feeds["attention_mask"], np.ones((B, 6), dtype=np.int64))
    assert call.phase == "decode"


def test_position_ids_follow_generates_rule_when_not_captured():
    call = _call(past=0, seq=4, mask=LEFT_PADDED)
    # generate(): cumsum(mask) - 1, padded positions set to 1
    np.testing.assert_array_equal(position_ids(call), [[1, 1, 0, 1], [0, 1, 2, 3]])
    decode = _call(past=4, seq=1, mask=np.hstack([LEFT_PADDED, np.ones((B, 1), int)]))
    np.testing.assert_array_equal(position_ids(decode), [[2], [4]])
    np.testing.assert_array_equal(cache_position(decode), [4])


def test_captured_position_ids_win_over_the_derived_ones():
    call = _call(past=0, seq=4, mask=LEFT_PADDED, positions=True)
    assert (position_ids(call) == 7).all()


def test_feeds_are_cast_to_the_onnx_dtypes():
    call = _call(past=3, seq=1, mask=None)
    sig = _signature(
        OPTIMUM_INPUTS, {"attention_mask": "int32", "past_key_values.0.key": "float16"}
    )
    feeds = onnx_feeds(call, sig)
    assert feeds["attention_mask"].dtype == np.int32
    assert feeds["past_key_values.0.key"].dtype == np.float16


def test_unmatched_onnx_input_names_both_sides():
    call = _call(past=0, seq=4, mask=LEFT_PADDED)
    with pytest.raises(InputError) as info:
        onnx_feeds(call, _signature(["input_ids", "token_type_ids", "past.0.k"]))
    message = str(info.value)
    assert "token_type_ids" in message and "past.0.k" in message
    assert "captured:" in message and "past_key_values.0.key" in message


def test_decode_step_into_a_file_without_cache_inputs_is_an_input_error():
    call = _call(past=4, seq=1, mask=None)
    with pytest.raises(InputError, match="decode steps"):
        onnx_feeds(call, _signature(["input_ids", "attention_mask"]))


def test_reference_outputs_name_present_by_layer_and_skip_unknown_outputs():
    call = _call(past=2, seq=1, mask=None)
    ref = reference_outputs(call, ("logits", "present.1.value", "present.9.key", "hidden"))
    assert set(ref) == {"logits", "present.1.value"}
    assert ref["present.1.value"] is call.present[1][1]


def test_last_position_logits_compare_with_the_last_onnx_positions():
    ref = np.arange(2 * 1 * 3, dtype=np.float32).reshape(2, 1, 3)
    full = np.zeros((2, 5, 3), dtype=np.float32)
    full[:, -1:, :] = ref
    case = Case(InputSet(0, {}), OutputSet({"logits": ref}), crop={"logits": logits_crop(ref)})
    shown, (comparison,) = compare_case(case, OutputSet({"logits": full}), Tolerances())
    assert shown.arrays["logits"].shape == ref.shape and comparison.status.passed
    assert "last 1 position" in comparison.message
    case = Case(InputSet(0, {}), OutputSet({"logits": full}), crop={"logits": logits_crop(full)})
    shown, (comparison,) = compare_case(case, OutputSet({"logits": full}), Tolerances())
    assert shown.arrays["logits"] is full and comparison.message == ""


def test_masked_positions_cover_padding_of_present_and_logits():
    call = _call(past=0, seq=4, mask=LEFT_PADDED)
    where = masked_positions(call, "present.0.key", (B, H, 4, D))
    assert np.broadcast_to(where, (B, H, 4, D)).sum() == 2 * H * D  # two padded positions
    assert masked_positions(call, "logits", (B, 1, VOCAB)) is not None
    assert not np.broadcast_to(masked_positions(call, "logits", (B, 1, VOCAB)), (B, 1, VOCAB)).any()
    assert masked_positions(_call(past=0, seq=4, mask=None), "present.0.key", (B, H, 4, D)) is None


def test_differences_at_padding_are_counted_apart_not_as_mismatches():
    call = _call(past=0, seq=4, mask=LEFT_PADDED)
    ref = call.present[0][0]
    onnx = ref.copy()
    onnx[0, :, 0, :] += 0.4  # padded position of row 0: never attended
    comparison = _judge(call, ref, onnx, "present.0.key")
    assert comparison.status.passed
    assert comparison.n_excluded == 2 * H * D
    assert comparison.excluded_max_abs == pytest.approx(0.4, rel=1e-6)
    assert comparison.stats.max_abs == 0.0  # the statistics cover judged elements only
    assert "padding" in comparison.message


def test_rejudging_keeps_the_notes_after_the_verdict(tmp_path):
    # Before: re-judging wrote the message from the verdict alone, so the padding note (and
    # a crop's) vanished as soon as a slider moved, and from a reopened saved run.
    from parity.reports.saved_run import load_run, save_run
    from parity.results import ValidationRun

    call = _call(past=0, seq=4, mask=LEFT_PADDED)
    ref = call.present[0][0]
    onnx = ref.copy()
    onnx[0, :, 0, :] += 0.4  # padding: excluded
    onnx[1, :, 3, :] += 1e-3  # a real token: fails at 1e-5
    c = _judge(call, ref, onnx, "present.0.key")
    (note,) = c.notes
    assert not c.status.passed and "padding" in note and c.message.endswith("; " + note)
    loose = c.rejudge(Tolerance(1e-2, 0))
    assert loose.status.passed and loose.message == note and loose.notes == c.notes
    tight = loose.rejudge(Tolerance(1e-5, 0))
    assert not tight.status.passed and tight.message == c.message
    run = ValidationRun.from_rows(
        model="m", onnx="m.onnx", signature=None, tolerances=Tolerances(), environment={},
        input_sets=(InputSet(0, {}),), outputs=(c,),
    )  # fmt: skip
    reopened = load_run(save_run(run, tmp_path / "run.parity.npz"))
    assert reopened.comparisons[0].notes == c.notes
    assert reopened.rejudge(Tolerances(Tolerance(1e-2, 0))).comparisons[0].message == note


def _judge(call: CapturedCall, ref: np.ndarray, onnx: np.ndarray, name: str):
    """The loop's comparison of one output of a case with this call's padding excluded."""
    case = Case(
        input_set=InputSet(0, {}),
        reference=OutputSet({name: ref}),
        exclude={name: masked_positions(call, name, ref.shape)},
        exclude_reason=PADDING,
    )
    _, (comparison,) = compare_case(case, OutputSet({name: onnx}), Tolerances(Tolerance(1e-5, 0)))
    return comparison


def test_differences_at_attended_positions_still_fail():
    call = _call(past=0, seq=4, mask=LEFT_PADDED)
    ref = call.present[0][0]
    onnx = ref.copy()
    onnx[0, :, 3, :] += 0.4  # a real token
    comparison = _judge(call, ref, onnx, "present.0.key")
    assert not comparison.status.passed
    assert comparison.excluded_max_abs == 0.0
    assert comparison.stats.worst_index[2] == 3  # indexes the full output, not the judged part


def test_config_overrides_parse_json_values_and_reject_bad_syntax():
    assert parse_config_override("num_hidden_layers=1") == ("num_hidden_layers", 1)
    assert parse_config_overrides(["a=0.5", "b=true", "c=silu"]) == {
        "a": 0.5,
        "b": True,
        "c": "silu",
    }
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_config_override("num_hidden_layers")


def test_options_reject_zero_new_tokens_and_empty_prompts():
    with pytest.raises(UsageError, match="max-new-tokens"):
        HfOptions(max_new_tokens=0)
    with pytest.raises(UsageError, match="prompt"):
        HfOptions(prompts=("  ",))


def test_optimum_merged_decoder_gets_use_cache_branch_and_token_type_ids():
    names = [*OPTIMUM_INPUTS, "use_cache_branch", "token_type_ids"]
    sig = _signature(names, {"use_cache_branch": "bool"})
    prefill = onnx_feeds(_call(past=0, seq=4, mask=LEFT_PADDED), sig)
    decode = onnx_feeds(_call(past=4, seq=1, mask=None), sig)
    assert prefill["use_cache_branch"].tolist() == [False]
    assert decode["use_cache_branch"].tolist() == [True]
    assert (decode["token_type_ids"] == 0).all() and decode["token_type_ids"].shape == (B, 1)


def test_dashboard_form_text_becomes_options():
    options = options_from_text(
        prompts="first prompt\n\n second prompt ",
        max_new_tokens=2,
        random_weights=True,
        overrides="num_hidden_layers=1, hidden_size=16\nrope_theta=500.0",
    )
    assert options.prompts == ("first prompt", "second prompt")
    assert options.config_overrides == {
        "num_hidden_layers": 1,
        "hidden_size": 16,
        "rope_theta": 500.0,
    }
    assert options_from_text(prompts=" \n", max_new_tokens=1).prompts == (DEFAULT_PROMPT,)
