"""The quantization analysis's findings (parity.analyses.quantization, its result
parity.results.quantization): a file's quantized weights, each a rounding of the model's or a
bug at its node, then each failing output split in two: the file against torch with its own
weights, and what those weights cost. Registered by name (parity.show.finder); it speaks
before the approximation's and on a passing candidate too (a weight can be wrong there).
"""

from __future__ import annotations

from parity.results import Finding, FindingKind, QuantizationResult, QuantizedTokens, ValidationRun
from parity.show.finder import asked_as, finds, numeric_failures
from parity.text import number_text

__all__ = ["quantization_findings"]


asked_as("quantization", "the quantization-aware reference")


@finds("quantization", rank=10, passing=True)
def quantization_findings(run: ValidationRun, candidate: int, limit: int | None) -> list[Finding]:
    """A file with weight-only quantized ops (parity.analyses.quantization): its weights
    (each a rounding of the model's, or a bug at its node), then each failing output split
    in two: the file against torch with its own weights, and what those weights cost."""
    quant = run.quantization
    assert quant is not None
    width = quant.width
    out: list[Finding] = []
    rounded = [w for w in quant.weights if w.status == "rounding"]
    if rounded:
        ops = sorted({w.op for w in rounded})
        sizes = sorted({w.block_size for w in rounded if w.op == "MatMulNBits"})
        blocks = f", blocks of {', '.join(map(str, sizes))}" if sizes else ""
        worst = max((w.max_steps or 0.0) for w in rounded)
        out.append(
            Finding(
                FindingKind.QUANTIZATION,
                f"{width} weights: {len(rounded)} {'/'.join(ops)} node(s){blocks}, each a "
                f"rounding of the model's weight (at most {worst:.2g} step off): "
                f"{width} rounding, intended, not a bug in the export.",
                candidate=candidate,
            )
        )
    for w in quant.bugs:
        what = f" ({w.defect})" if w.defect else ""
        out.append(
            Finding(
                FindingKind.BUG,
                f"The {w.op} node {w.node}: its int{w.bits} weights are not a rounding of "
                f"{w.parameter}: {w.bad_blocks} of {w.n_blocks} block(s) are off by up to "
                f"{_steps(w.max_steps)} steps{what}; a bug in the quantized weights, made at "
                "this node.",
                candidate=candidate,
            )
        )
    bad = ", ".join(w.node for w in quant.bugs[:3])
    ref = quant.reference
    themselves = (
        f"and the {quant.activations} rounding of its activations at run time"
        if quant.activations and quant.activations_simulated
        else "themselves"
    )
    by_name = {o.name: o for o in quant.outputs}
    for name in list(numeric_failures(run))[:limit]:
        o = by_name.get(name)
        if o is None or o.export_passed is None:
            continue
        cost = (
            f"the {width} weights {themselves} move it to an SQNR of {o.sqnr_db:.1f} dB "
            f"(max abs {number_text(o.quant_max_abs)}) from {ref}'s float weights"
            if o.sqnr_db is not None
            else f"the {width} weights {themselves} move it by max abs "
            f"{number_text(o.quant_max_abs)} from {ref}'s float weights"
        )
        agrees = (
            f"against {ref} with the file's own dequantized weights it agrees (max abs "
            f"{number_text(o.export_max_abs)}, within the run's tolerance)"
        )
        if quant.float_twin:  # static quantization (parity.analyses.static_quant)
            agrees = "with its activation rounding taken out, the file " + agrees.replace(
                "it agrees", "agrees", 1
            )
        if not o.export_passed and not quant.activations_simulated:
            text = (
                f"{name}: against {ref} with the file's own dequantized weights it differs by "
                f"max abs {number_text(o.export_max_abs)}, which includes the file's "
                f"{quant.activations} rounding of its activations at run time ({ref} does not "
                "round them): not judged a bug; "
                f"{cost}."
            )
            out.append(Finding(FindingKind.QUANTIZATION, text, name, candidate))
        elif not o.export_passed and _within_flips(o.export_max_abs, o.flip_max_abs):
            text = (
                f"{name}: against {ref} with the file's own dequantized weights and its "
                f"{quant.activations} rounding of activations it differs by max abs "
                f"{number_text(o.export_max_abs)}, no more than values on a rounding boundary "
                f"move it (max abs {number_text(o.flip_max_abs)} with each rounding nudged by "
                f"a thousandth of a step): {width} rounding, not a bug; {cost}."
            )
            out.append(Finding(FindingKind.QUANTIZATION, text, name, candidate))
        elif not o.export_passed and quant.unsimulated:
            text = (
                f"{name}: against {ref} with the file's own dequantized weights it differs by "
                f"max abs {number_text(o.export_max_abs)}; the file's "
                f"{', '.join(quant.unsimulated)} compute with int8 in ways {ref} does not "
                "simulate, so whether that is the rounding was not measured."
            )
            out.append(Finding(FindingKind.UNMEASURED, text, name, candidate))
        elif not o.export_passed:
            what = "with its activation rounding taken out, " if quant.float_twin else ""
            located = quant.located
            where = f"; it starts at {located}, --layers on its float twin" if located else ""
            text = (
                f"{name}: not {width} rounding: {what}against {ref} with the file's own "
                f"dequantized weights it still differs (max abs {number_text(o.export_max_abs)}, "
                "beyond the run's tolerance), so the export or its kernels compute something "
                f"else{where or _born_where(run, quant)}."
            )
            out.append(Finding(FindingKind.BUG, text, name, candidate))
        elif quant.bugs:
            text = f"{name}: {agrees}, but its weights are wrong at {bad}: {cost}."
            out.append(Finding(FindingKind.BUG, text, name, candidate))
        else:
            what = f"{width} weights and activations" if quant.float_twin else f"{width} weights"
            text = f"{name}: {what}, not a bug in the export: {agrees}; {cost}."
            out.append(Finding(FindingKind.QUANTIZATION, text, name, candidate))
    tokens = quant.tokens
    if tokens is not None:
        said = _token_words(tokens)
        if said:
            text = f"{width} weights and the tokens: {'; '.join(said)}."
            out.append(Finding(FindingKind.QUANTIZATION, text, candidate=candidate))
    return out


def _born_where(run: ValidationRun, quant: QuantizationResult) -> str:
    """Where --layers confirmed the error born, when its torch side computed what a dynamic
    int8 file means (parity.analyses.layers: its weights, its activations rounded), so the
    node it names is one that account does not explain."""
    layers = run.layers
    if layers is None or quant.reference != "torch" or quant.activations != "uint8 per tensor":
        return ""
    first = layers.first_divergence
    confirmation = layers.confirmation_of(first)
    if first is None or getattr(confirmation, "outcome", None) != "born":
        return ""
    module = f" in {first.torch_module}" if first.torch_module else ""
    return (
        f": the error is made at the {first.onnx_op} node {first.onnx_node}{module} (--layers, "
        "confirmed alone against torch computing what the file means)"
    )


def _within_flips(residual: float | None, flips: float | None) -> bool:
    """The file's difference from the reference that rounds as it does is no more than
    what flipping values on a rounding boundary moves that reference (measured)."""
    return residual is not None and flips is not None and residual <= flips


def _token_words(tokens: QuantizedTokens) -> list[str]:
    """What a causal LM's tokens say with the file's weights: greedy new tokens against
    torch's (and ONNX Runtime's own against them), top-1 agreement and KL."""
    said = []
    if tokens.greedy_total:
        change = (
            f" (first change at new token {tokens.first_change + 1})"
            if tokens.first_change is not None
            else ""
        )
        said.append(
            f"torch with the file's weights picks torch's greedy token for "
            f"{tokens.greedy_agree} of {tokens.greedy_total} new tokens{change}"
        )
        if tokens.onnx_agree is not None:
            said.append(
                f"ONNX Runtime's own tokens agree with torch-with-its-weights' for "
                f"{tokens.onnx_agree} of {tokens.greedy_total}"
            )
    if tokens.top1_agreement is not None and tokens.kl_mean is not None:
        said.append(
            f"top-1 agreement {tokens.top1_agreement:.1%} and mean KL divergence "
            f"{tokens.kl_mean:.3g} over every step's positions"
        )
    return said


def _steps(value: float | None) -> str:
    return "?" if value is None else f"{value:.3g}"
