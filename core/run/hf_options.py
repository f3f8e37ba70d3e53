"""What an `hf:DIR` run is asked to do: prompts, steps, weights and config overrides.

Kept apart from the loading code so the CLI and the dashboard can build and check options
without importing transformers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from parity.errors import UsageError
from parity.load.specs import HF_PREFIX
from parity.settings import Mention, Setting

DEFAULT_PROMPT = "Continue: it rains, what should I do?"
DEFAULT_MAX_NEW_TOKENS = 3
INSTALL_HINT = "pip install 'onnx-parity[hf]'"


@dataclass(frozen=True)
class HfOptions:
    """Options of one Hugging Face run. Several prompts form one left-padded batch."""

    prompts: tuple[str, ...] = (DEFAULT_PROMPT,)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    random_weights: bool = False
    config_overrides: Mapping[str, Any] = field(default_factory=dict)
    export_path: str | None = None  # where Parity's own export goes (None: a temp dir)
    # Optimum's task name (checked against parity.hf.heads when a run starts); None: the class
    # config.architectures names
    task: str | None = None
    generation: bool = True  # causal LMs: ONNX Runtime also generates on its own afterwards

    def __post_init__(self) -> None:
        if not self.prompts:
            raise UsageError(("hf: give at least one ", Mention("prompt")))
        if any(not isinstance(p, str) or not p.strip() for p in self.prompts):
            raise UsageError(("hf: every ", Mention("prompt"), " must be a non-empty text"))
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise UsageError(
                f"must be >= 1, got {self.max_new_tokens!r}", setting=Setting("max_new_tokens")
            )


def options_from_text(
    *, prompts: str, max_new_tokens: int, random_weights: bool = False, overrides: str = ""
) -> HfOptions:
    """HfOptions from form fields (the dashboard): one prompt per line; overrides
    ``KEY=VALUE`` separated by newlines or commas. Blank lines are ignored."""
    prompt_list = tuple(line.strip() for line in prompts.splitlines() if line.strip())
    items = [item.strip() for line in overrides.splitlines() for item in line.split(",")]
    return HfOptions(
        prompts=prompt_list or (DEFAULT_PROMPT,),
        max_new_tokens=max_new_tokens,
        random_weights=random_weights,
        config_overrides=parse_config_overrides(item for item in items if item),
    )


def hf_directory(spec: str) -> str:
    """The directory of an `hf:DIR` spec (a bare directory is accepted too)."""
    directory = spec.removeprefix(HF_PREFIX)
    if not directory:
        raise UsageError(f"model spec {spec!r}: expected hf:DIR (a local transformers directory)")
    return directory


def parse_config_override(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value); VALUE is read as JSON when it is (1, 0.5, true, null)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not key.replace("_", "a").replace(".", "a").isalnum():
        raise UsageError(
            "expected KEY=VALUE, e.g. num_hidden_layers=1",
            setting=Setting("config_override", repr(text)),
        )
    if key.startswith("_"):
        raise UsageError(
            "not a config field (private or dunder name)",
            setting=Setting("config_override", str(key)),
        )
    raw = raw.strip()
    if not raw:
        raise UsageError(
            f"needs a value, e.g. {key}=1", setting=Setting("config_override", str(key))
        )
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def typed_override(config: Any, key: str, value: Any) -> Any:
    """`value` as the type of the config field `key` holds now (int, float, bool, text; a
    list or dict for such fields); a UsageError naming the field and what it takes when it
    is not a field of the config or the value does not fit."""
    fields = set(config.to_dict()) | set(getattr(config, "attribute_map", None) or {})
    name = type(config).__name__
    if key.startswith("_") or key not in fields:
        raise UsageError(
            f"{name} has no field {key!r}", setting=Setting("config_override", str(key))
        )
    current = getattr(config, key, None)
    shown = value if isinstance(value, str) else json.dumps(value)
    expected = _fits(current, value)
    if expected:
        raise UsageError(
            f"{name}.{key} takes {expected} "
            f"(it is {json.dumps(current) if not isinstance(current, str) else current})",
            setting=Setting("config_override", f"{key}={shown}"),
        )
    return float(value) if type(current) is float else value


def _fits(current: Any, value: Any) -> str:
    """'' when `value` fits a field holding `current`, else what the field takes."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(current, bool):
        return "" if isinstance(value, bool) else "true or false"
    if isinstance(current, int):
        return "" if is_number and isinstance(value, int) else "an integer"
    if isinstance(current, float):
        return "" if is_number and math.isfinite(value) else "a finite number"
    if isinstance(current, str):
        return "" if isinstance(value, str) else "a text"
    if isinstance(current, (list, dict)):
        kind = type(current)
        return "" if isinstance(value, kind) else f"a JSON {'list' if kind is list else 'object'}"
    if current is None:
        if value is None or isinstance(value, (bool, str)):
            return ""
        return "" if is_number and math.isfinite(value) else "a finite number, a text or true/false"
    return "no value from the command line"


def parse_config_overrides(items: Iterable[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in items:
        key, value = parse_config_override(item)
        overrides[key] = value
    return overrides


def format_overrides(overrides: Mapping[str, Any]) -> str:
    if not overrides:
        return "none"
    return ", ".join(
        f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in overrides.items()
    )
