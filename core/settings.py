"""The settings a user error can be about, and each front end's word for one.

An error names its setting by field (`Setting`), never by a flag in its text; the CLI says
the flag (``--dim batch: ...``), `parity.validate` its keyword (``dims=batch: ...``) and
the dashboard the Run form's widget (``“Sizes of the symbolic dims” batch: ...``). A
message that mentions other settings mid-sentence holds them as `Mention` parts. This table
is the one place a setting's three names are written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class Front(Enum):
    """Who shows the error: each has its own word for a setting."""

    CLI = "cli"
    API = "api"
    DASHBOARD = "dashboard"


@dataclass(frozen=True)
class Words:
    """One setting's names: the CLI flag, `validate`'s keyword, the Run form's widget label
    (None: that front end has no such setting, and the flag is said instead)."""

    flag: str
    keyword: str | None = None
    widget: str | None = None


SETTINGS: dict[str, Words] = {
    # RunConfig's fields (parity.run.config), by name
    "model": Words("--model", "model", "PyTorch model"),
    "onnx": Words("--onnx", "onnx", "ONNX file"),
    "weights": Words("--weights", "weights", "Weights"),
    "dims": Words("--dim", "dims", "Sizes of the symbolic dims"),
    "n_input_sets": Words("--input-sets", "input_sets", "Input sets"),
    "seed": Words("--seed", "seed", "Seed"),
    "int_ranges": Words("--int-range", None, "Integer inputs"),
    "float_range": Words("--float-range", "float_range", "Float inputs range"),
    "input_files": Words("--inputs", "inputs", "Your own feeds"),
    "provider": Words("--provider", "provider", "Execution providers"),
    "ort_opt_level": Words("--ort-opt-level", "ort_opt_level", "ORT optimisation levels"),
    "tolerances": Words("--tol", "tolerances", "Tolerances"),
    "reference_file": Words("--reference", "reference", "Stored reference outputs"),
    "layers": Words("--layers", "layers", "Compare layers"),
    "layers_memory_mb": Words("--layers-memory"),
    "noise_floor": Words("--noise-floor", "noise_floor", "Measure rounding noise"),
    "quantized_reference": Words("--no-quantized-reference", "quantized_reference"),
    "judge": Words("--judge", "judge", "Judge by"),
    "timeout": Words("--timeout", "timeout", "Time limit"),
    # analyses the dashboard runs by a button, not a form field: their button's label
    "suggest": Words("--suggest", None, "Suggest"),
    "stages": Words("--stages", None, "These files are one pipeline's stages"),
    "repro": Words("--repro", None, "Download a standalone repro (.zip)"),
    "max_memory": Words("--max-memory", "max_memory"),
    "data": Words("--data", "data", "Data set"),
    # an hf: model's options (parity.run.hf_options.HfOptions)
    "prompt": Words("--prompt", None, "Prompts"),
    "max_new_tokens": Words("--max-new-tokens", None, "Max new tokens"),
    "config_override": Words("--config-override", None, "Config overrides"),
    "random_weights": Words("--random-weights"),
    "task": Words("--task"),
    "export_path": Words("--export-path"),
}


@dataclass(frozen=True)
class Setting:
    """What an error is about: a setting (a key of SETTINGS) and, where it has several,
    which item of it (a dim's name, an input's name, the value given)."""

    name: str
    item: str = ""

    def __post_init__(self) -> None:
        if self.name not in SETTINGS:  # a typo at a raise site, caught by its first test
            raise KeyError(f"no setting {self.name!r} in parity.settings.SETTINGS")


@dataclass(frozen=True)
class Mention:
    """A setting named inside a sentence, with the value after it ("--max-memory 1G" and
    "max_memory=1G"); a `placeholder` one ("--model SPEC") is not said by the dashboard,
    whose widget is the place to type it."""

    name: str
    metavar: str = ""
    placeholder: bool = False


Part = str | Mention


def word(name: str, front: Front) -> str:
    """A setting's name in `front`'s words: the flag, ``keyword=``, or “Widget”."""
    words = SETTINGS[name]
    if front is Front.API and words.keyword is not None:
        return f"{words.keyword}="
    if front is Front.DASHBOARD and words.widget is not None:
        return f"“{words.widget}”"
    return words.flag


_BY_FLAG = {words.flag: name for name, words in SETTINGS.items()} | {"--tolerances": "tolerances"}
# The fallback for text that still writes flags (a run's findings, raise sites not yet
# converted to `Setting` / `Mention`): the API's keyword takes the value after the flag
# ("--max-memory 8G" -> "max_memory=8G"); the dashboard's widget drops the CLI's placeholder
# ("--model SPEC").
_API_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?: (?=[^\s:;,]))?")
_WIDGET_FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?:\s+(?:SPEC|REF\.npz|FEEDS\.npz|FILE))?")


def flags_said(text: str, front: Front) -> str:
    """`text`'s `parity validate` flags in `front`'s words; a flag that front has no word for
    stays. For text written before its settings were named by field (prefer `Mention`)."""
    if front is Front.CLI:
        return text
    pattern = _API_FLAG if front is Front.API else _WIDGET_FLAG

    def said(match: re.Match[str]) -> str:
        name = _BY_FLAG.get(match[1])
        said = match[1] if name is None else word(name, front)
        return match[0] if said == match[1] else said

    return pattern.sub(said, text)


def _said(part: Part, front: Front) -> str:
    if isinstance(part, str):
        return part
    said = word(part.name, front)
    if not part.metavar or (part.placeholder and front is Front.DASHBOARD):
        return said
    return f"{said}{part.metavar}" if said.endswith("=") else f"{said} {part.metavar}"


def worded(body: Sequence[Part], setting: Setting | None, front: Front) -> str:
    """An error's one line for `front`: its setting's word, the item, then the body. Text
    that names no setting by field goes through `flags_said` (what it says is all flags);
    one that does is said as written (a shell command in it keeps its flags)."""
    text = "".join(_said(part, front) for part in body)
    if setting is None:
        named = any(isinstance(part, Mention) for part in body)
        return text if named else flags_said(text, front)
    said = word(setting.name, front)
    if setting.item:
        joint = "" if said.endswith("=") else " "
        return f"{said}{joint}{setting.item}: {text}"
    joint = "" if text.startswith(":") else " "  # "--float-range: expected ..."
    return f"{said.removesuffix('=')}{joint}{text}"
