"""What a file's quantized weights are and cost (parity.analyses.quantization and
parity.analyses.static_quant make it; a candidate holds it by that name)."""

from __future__ import annotations

from dataclasses import dataclass

from parity.results.by_name import analysis_result


@dataclass(frozen=True)
class QuantizedWeight:
    """One weight-only quantized node of a file (parity.analyses.quantization): its weight
    against the torch parameter it was made from. `max_steps` is the largest |model weight
    - file weight| in steps of its block (a rounding stays within about one); `bad_blocks`
    the blocks beyond one step, `defect` what is wrong there ("" when nothing is)."""

    node: str
    op: str
    bits: int
    block_size: int
    shape: tuple[int, int]  # (K, N): the MatMul's B
    parameter: str | None  # the torch parameter(s) it stands for; None: not matched
    max_steps: float | None = None
    bad_blocks: int = 0
    n_blocks: int = 0
    defect: str = ""

    @property
    def status(self) -> str:
        """ "rounding" (within a step of the model's weight), "bug", or "unmatched"."""
        if self.parameter is None:
            return "unmatched"
        return "bug" if self.bad_blocks else "rounding"


@dataclass(frozen=True)
class QuantizedOutput:
    """One output split in two: the file against torch with the file's own dequantized
    weights (the export and its kernels) and that against torch (what quantizing costs)."""

    name: str
    export_max_abs: float | None  # file vs torch-with-its-weights, over every input set
    export_passed: bool | None  # ... at the run's tolerance (None: not compared)
    sqnr_db: float | None  # torch-with-its-weights against torch (None: exact or not run)
    quant_max_abs: float | None = None
    # where the file fails against it and rounds its activations: how far the reference
    # moves when each rounding is nudged by a thousandth of a step (a value that lies on a
    # rounding boundary can round either way in the file's kernels); None: not measured
    flip_max_abs: float | None = None


@dataclass(frozen=True)
class QuantizedTokens:
    """A causal LM's tokens with the file's weights: over every step's judged positions,
    torch's top-1 against torch-with-its-weights' and the mean KL divergence of their
    next-token distributions; greedy generate() with the file's weights against torch's new
    tokens, and ONNX Runtime's own new tokens against it."""

    top1_agreement: float | None
    kl_mean: float | None
    greedy_agree: int = 0
    greedy_total: int = 0
    first_change: int | None = None  # the first new token (0-based) where greedy differs
    onnx_agree: int | None = None  # ONNX Runtime's free-running tokens vs the file's weights'


@analysis_result("quantization")
@dataclass(frozen=True)
class QuantizationResult:
    """What a file's quantized weights are and cost (parity.analyses.quantization)."""

    weights: tuple[QuantizedWeight, ...]
    outputs: tuple[QuantizedOutput, ...] = ()
    tokens: QuantizedTokens | None = None
    notes: tuple[str, ...] = ()
    # how the file rounds its activations at run time too ("" none; "uint8 per tensor":
    # dynamic quantization; "int8 per block": MatMulNBits at accuracy_level 4 on the CPU)
    activations: str = ""
    activations_simulated: bool = True  # the reference rounds them too (torch does)
    reference: str = "torch"  # what the weights were put into: "torch", "the reference file"
    # static quantization: the file's own graph with its activation rounding taken out is
    # what was compared with the reference (parity.analyses.static_quant)
    float_twin: bool = False
    # where the float twin starts to differ from torch with the file's weights (--layers on
    # it: "the Add node /Add (confirmed alone)"); "" when not looked for or not found
    located: str = ""
    # quantized ops of the file the reference does not compute as the file does (QAttention,
    # QEmbedLayerNormalization): a difference left is then not judged
    unsimulated: tuple[str, ...] = ()

    @property
    def width(self) -> str:
        """The bit widths in words: "int4", "int4 and int8"."""
        bits = sorted({w.bits for w in self.weights})
        return " and ".join(f"int{b}" for b in bits) or "quantized"

    @property
    def bugs(self) -> tuple[QuantizedWeight, ...]:
        return tuple(w for w in self.weights if w.status == "bug")

    @property
    def faithful(self) -> bool | None:
        """The file computes what its quantized weights say (every output within the run's
        tolerance of torch with them); None when not compared."""
        judged = [o.export_passed for o in self.outputs if o.export_passed is not None]
        return all(judged) if judged else None
