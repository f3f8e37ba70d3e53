"""Typed results that pass between the core's steps, the CLI, the dashboard and reports.

Data flows one way: InputSet -> (torch, ONNX Runtime) OutputSet -> OutputComparison ->
ValidationRun. Re-judging at other tolerances never touches raw tensors: every
OutputComparison carries an ErrorProfile (parity.judge.error_profile) that answers for any (atol,
rtol). One module per job (comparison, candidate, run, generation, padded, evidence, and each
analysis's result); every name is imported from here, `parity.results`.
"""

from __future__ import annotations

from parity.results.answers import DataResult  # --data's, registered by name there
from parity.results.approximation import (
    ApproximatedOutput,
    ApproximationResult,
)
from parity.results.candidate import (
    CandidateInfo,
    CandidateRun,
    Provenance,
    RunKind,
)
from parity.results.comparison import (
    ErrorStats,
    InputCase,
    InputSet,
    OutputComparison,
    OutputSet,
    Status,
    set_passed,
)
from parity.results.evidence import (
    FINDING_KINDS,
    SUGGESTION_BASES,
    AnalysisNote,
    Finding,
    FindingKind,
    SuggestedTolerances,
)
from parity.results.frozen import (
    FROZEN_KINDS,
    FrozenNode,
    FrozenNodes,
    StaticAxes,
    StaticAxis,
)
from parity.results.generation import (
    GenerationInfo,
    GenerationStep,
    PromptGeneration,
    TokenDivergence,
)
from parity.results.noise import NOISE_PRECISIONS, Noise, PrecisionRun
from parity.results.padded import PaddedBatch, PaddedPrompt
from parity.results.quantization import (
    QuantizationResult,
    QuantizedOutput,
    QuantizedTokens,
    QuantizedWeight,
)
from parity.results.run import (
    RunFiles,
    SavedFrom,
    ValidationRun,
    register_run_files,
)

__all__ = [
    "FINDING_KINDS",
    "FROZEN_KINDS",
    "NOISE_PRECISIONS",
    "SUGGESTION_BASES",
    "AnalysisNote",
    "ApproximatedOutput",
    "ApproximationResult",
    "CandidateInfo",
    "CandidateRun",
    "DataResult",
    "ErrorStats",
    "Finding",
    "FindingKind",
    "FrozenNode",
    "FrozenNodes",
    "GenerationInfo",
    "GenerationStep",
    "InputCase",
    "InputSet",
    "Noise",
    "OutputComparison",
    "OutputSet",
    "PrecisionRun",
    "PaddedBatch",
    "PaddedPrompt",
    "PromptGeneration",
    "Provenance",
    "QuantizationResult",
    "QuantizedOutput",
    "QuantizedTokens",
    "QuantizedWeight",
    "RunFiles",
    "RunKind",
    "SavedFrom",
    "StaticAxes",
    "StaticAxis",
    "Status",
    "SuggestedTolerances",
    "TokenDivergence",
    "ValidationRun",
    "register_run_files",
    "set_passed",
]
