"""Which file of an Optimum encoder-decoder export runs which captured call, and with what.

Optimum (`optimum-cli export onnx --task text2text-generation-with-past`, or
`automatic-speech-recognition-with-past`) writes a folder with `encoder_model.onnx`,
`decoder_model.onnx` (the first decoder step: no past), `decoder_with_past_model.onnx`
(later steps, reading the cache) and, by default, `decoder_model_merged.onnx` (both, chosen
by its `use_cache_branch` input). A folder is validated with the encoder and the merged
decoder when there is one (what Optimum's runtime loads), else with the two decoders. A
single file is given its role by its signature, never by its name, so a renamed file works.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from parity.errors import InputError, UsageError
from parity.hf.feeds import _cast
from parity.hf.seq2seq_capture import DECODER, ENCODER, LAST_HIDDEN, Seq2SeqCall
from parity.settings import Setting
from parity.signature import OnnxSignature

ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_model.onnx"
WITH_PAST_FILE = "decoder_with_past_model.onnx"
MERGED_FILE = "decoder_model_merged.onnx"
FOLDER_FILES = (ENCODER_FILE, MERGED_FILE, DECODER_FILE, WITH_PAST_FILE)


class Role(StrEnum):
    """What a file of an encoder-decoder export computes."""

    ENCODER = "encoder"
    DECODER = "decoder"  # the first decoder step only (no past inputs)
    WITH_PAST = "decoder with past"  # steps after the first
    MERGED = "merged decoder"  # every decoder step (use_cache_branch)

    def runs(self, call: Seq2SeqCall) -> bool:
        if call.role == ENCODER:
            return self is Role.ENCODER
        if self is Role.MERGED:
            return True
        if self is Role.DECODER:
            return call.past_length == 0
        return self is Role.WITH_PAST and call.past_length > 0


def role_of(signature: OnnxSignature, where: str) -> Role:
    """A file's role from its inputs and outputs; UsageError when it has none of them."""
    inputs, outputs = set(signature.input_names), set(signature.output_names)
    if "use_cache_branch" in inputs:
        return Role.MERGED
    if any(name.startswith("past_key_values.") for name in inputs):
        return Role.WITH_PAST
    if "logits" in outputs:
        return Role.DECODER
    if LAST_HIDDEN in outputs:
        return Role.ENCODER
    raise UsageError(
        f"{where}: neither an encoder (output {LAST_HIDDEN!r}) nor a decoder (output 'logits') "
        f"of an encoder-decoder export; inputs {sorted(inputs)}, outputs {sorted(outputs)}"
    )


def folder_files(folder: str | Path) -> dict[str, str]:
    """The files of an Optimum export folder this run uses, by file name, main one first
    (the decoder that runs the most steps: its signature is the run's)."""
    path = Path(folder)
    present = {name: str(path / name) for name in FOLDER_FILES if (path / name).is_file()}
    decoders = [MERGED_FILE] if MERGED_FILE in present else [WITH_PAST_FILE, DECODER_FILE]
    chosen = [name for name in (*decoders, ENCODER_FILE) if name in present]
    if not chosen:
        raise UsageError(
            f"a folder must hold an Optimum encoder-decoder export "
            f"({', '.join(FOLDER_FILES)}); none of them is there",
            setting=Setting("onnx", str(folder)),
        )
    return {name: present[name] for name in chosen}


@dataclass(frozen=True)
class Part:
    """One file of the export: its key in the run (file name, "" for a single file)."""

    key: str
    role: Role
    signature: OnnxSignature


def parts_of(signatures: Mapping[str, OnnxSignature]) -> tuple[Part, ...]:
    return tuple(Part(key, role_of(sig, key or "--onnx"), sig) for key, sig in signatures.items())


def part_for(call: Seq2SeqCall, parts: tuple[Part, ...]) -> Part | None:
    """The file that runs this call (a merged decoder before two plain ones), or None."""
    matching = [p for p in parts if p.role.runs(call)]
    return min(matching, key=lambda p: p.role is not Role.MERGED) if matching else None


def feeds_for(call: Seq2SeqCall, signature: OnnxSignature) -> dict[str, np.ndarray]:
    """The call's feeds for one file, cast to its declared dtypes; InputError listing both
    sides' names when the file asks for something the call does not have."""
    missing = [name for name in signature.input_names if name not in call.feeds]
    if missing:
        raise InputError(
            f"hf: cannot feed ONNX input(s) {missing} from the captured {call.label} call; "
            f"ONNX inputs: {list(signature.input_names)}; captured: {sorted(call.feeds)}"
        )
    return {spec.name: _cast(call.feeds[spec.name], spec.dtype) for spec in signature.inputs}


def reference_for(call: Seq2SeqCall, signature: OnnxSignature) -> dict[str, np.ndarray]:
    """torch's outputs under the file's output names (those torch has: the rest are
    reported missing on the torch side)."""
    return {name: call.outputs[name] for name in signature.output_names if name in call.outputs}


PLACEHOLDER = (
    "placeholder: the merged decoder's with-past branch outputs a constant here (cross-"
    "attention keys/values are computed at decoder step 0 and read from the past after); "
    "Optimum's runtime ignores it, as decoder_with_past_model.onnx has no such output"
)


def ignored_outputs(call: Seq2SeqCall, part: Part) -> dict[str, str]:
    """Outputs of this file that mean nothing on this call, and why."""
    if part.role is not Role.MERGED or call.past_length == 0:
        return {}
    return {n: PLACEHOLDER for n in part.signature.output_names if _cross_present(n)}


def _cross_present(name: str) -> bool:
    return name.startswith("present.") and ".encoder." in name


def padding_mask(call: Seq2SeqCall, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """True where an output sits at an encoder position the attention mask excludes: the
    encoder's padded rows, and the cross-attention keys/values computed from them."""
    pad = call.padding
    if pad is None or len(shape) < 3 or shape[0] != pad.shape[0]:
        return None
    if name == LAST_HIDDEN and len(shape) == 3 and shape[1] == pad.shape[1]:
        return pad[:, :, None]
    if ".encoder." in name and len(shape) == 4 and shape[2] == pad.shape[1]:
        return pad[:, None, :, None]
    return None


def steps_covered(calls: tuple[Seq2SeqCall, ...], parts: tuple[Part, ...]) -> dict[str, str]:
    """Each call's label -> the file that validates it ("" when no file does)."""
    return {c.label: (p.key if (p := part_for(c, parts)) else "") for c in calls}


__all__ = [
    "DECODER",
    "ENCODER",
    "Part",
    "Role",
    "feeds_for",
    "folder_files",
    "ignored_outputs",
    "padding_mask",
    "part_for",
    "parts_of",
    "reference_for",
    "role_of",
    "steps_covered",
]
