"""An LLM run as text: one row per generate() step, failing details, and the run summary.

The CLI prints it after `parity validate --model hf:DIR`; the dashboard's overview shows the
summary. Importing this module never imports transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parity.hf.media import MEDIA_INPUTS
from parity.hf.summary import PHASES, judged_summary
from parity.labels import status_label, worst_first
from parity.results import OutputComparison, Status, ValidationRun
from parity.run.hf_options import format_overrides
from parity.show.generation_text import generation_lines
from parity.show.summary import candidate_notes
from parity.text import aligned_table, number_text, shape_text, terminal_text

SEQ2SEQ = "encoder_decoder"  # the summary "kind" of an encoder-decoder run (seq2seq_source)


def format_steps_table(run: ValidationRun) -> str:
    """One row per generate() step, then failing details, then the summary.

    Columns: step, phase, input shapes (ids · mask · past), status, logits max abs/rel,
    the worst present key/value's max abs/rel and name, and the padding excluded.
    """
    steps = run.generation.steps if run.generation is not None else ()
    names = run.output_names
    main = "logits" if "logits" in names or not names else names[0]
    seq2seq = _is_seq2seq(run)
    if seq2seq:  # the encoder's row shows its hidden states where decoders show logits
        main = "logits|hidden"
    files = _file_of_step(run) if seq2seq else {}
    # A one-forward model has no cache: its other outputs (pred_boxes, end_logits) go there.
    rest = "present" if seq2seq or any(n.startswith("present.") for n in names) else "other"
    ids = any("input_ids" in s.feeds for s in run.input_sets)
    header = [
        "step",
        "file" if seq2seq else "phase",
        "input shapes (ids · mask · past)" if ids else "input shapes",
        "status",
        f"{main} abs",
        f"{main} rel",
        f"{rest} abs",
        f"{rest} rel",
        f"worst {rest}",
        "padding excluded",
    ]
    rows = [header]
    details: list[str] = []
    for i, input_set in enumerate(run.input_sets):
        step = steps[i] if i < len(steps) else None
        mine = [c for c in run.outputs if c.input_set == input_set.index]
        wanted = ("logits", "last_hidden_state") if seq2seq else (main,)
        logits = next((c for w in wanted for c in mine if c.name == w), None)
        presents = [
            c
            for c in mine
            if (c.name.startswith("present.") if rest == "present" else c.name != main)
        ]
        worst = _worst(presents)
        pad = [c for c in mine if c.n_excluded]
        pad_text = "-"
        if pad:
            diffs = [c.excluded_max_abs for c in pad if c.excluded_max_abs is not None]
            count = sum(c.n_excluded for c in pad)
            pad_text = f"{count} (max {number_text(max(diffs)) if diffs else 'nan'})"
        rows.append(
            [
                (step.label if seq2seq else str(step.step)) if step else str(i + 1),
                (files.get(step.label, "?") if seq2seq else step.phase) if step else "?",
                _shapes(input_set.feeds),
                status_label(_step_status(mine), "terminal"),
                number_text(_stat(logits, "max_abs")),
                number_text(_stat(logits, "max_rel")),
                number_text(_stat(worst, "max_abs")),
                number_text(_stat(worst, "max_rel")),
                worst.name if worst else "-",
                pad_text,
            ]
        )
        details += _failing_details(input_set.label or f"step {i + 1}", mine)
    parts = [aligned_table(rows)]
    if details:
        parts += ["", *map(terminal_text, details)]
    parts += ["", format_hf_summary(run)]
    if run.generation is not None and (free := generation_lines(run.generation)):
        parts += ["", *map(terminal_text, free)]  # the texts generated: one line each
    return "\n".join(parts)


def _failing_details(label: str, comparisons: list[OutputComparison], limit: int = 5) -> list[str]:
    """One line per failing output of a step (at most `limit`), message lines joined."""
    failing = [c for c in comparisons if not c.status.passed]
    lines = [
        f"  {label}: {c.name} {status_label(c.status, 'terminal')}: "
        + "; ".join(part.strip() for part in c.message.splitlines() if part.strip())
        for c in failing[:limit]
    ]
    if len(failing) > limit:
        lines.append(f"  {label}: and {len(failing) - limit} more failing output(s)")
    return lines


def format_hf_summary(run: ValidationRun) -> str:
    """The run summary: model, overrides, weights, prompts, calls, export, steps, time."""
    s: Mapping[str, Any] = judged_summary(run)
    prompts = s.get("prompts") or []
    side = s.get("padding", "left" if s.get("left_padded") else "none")
    batch = f"{side}-padded batch" if side in ("left", "right") else "batch"
    if run.generation is not None and run.generation.padded_batch is not None:
        side = run.generation.padded_batch.side  # parity.hf.padded_batch
        batch = f"each alone, then as one {side}-padded batch"
    export = s.get("export") or {}
    status = str(export.get("status", "?"))
    if export.get("seconds") is not None:
        status += f" ({export['seconds']:.1f} s)"
    if export.get("path"):
        status += f" -> {export['path']}"
    if export.get("cause"):
        status += f": {export['cause']}"
    steps = f"{s.get('steps_ok', 0)}/{s.get('steps_total', 0)}"
    if s.get("failed_steps"):
        steps += " — failing: " + ", ".join(s["failed_steps"])
    masked = s.get("masked") or {}
    times = s.get("timings") or {}
    time_text = " · ".join(
        f"{name} {times[name]:.2f} s" for name in PHASES if times.get(name) is not None
    )
    lines = [
        f"model:     {s.get('model', run.model)} — {s.get('model_type', '?')} "
        f"({s.get('architecture', '?')}{_task_text(s)}), {s.get('weights', '?')} weights, "
        f"config overrides: {format_overrides(s.get('config_overrides') or {})}",
        f"prompts:   {len(prompts)} ({batch}): " + " | ".join(repr(p) for p in prompts)
        if prompts or not s.get("inputs")
        else f"inputs:    {s['inputs']}",
        f"calls:     {_calls_text(s)}",
        f"export:    {status}",
        f"steps OK:  {steps}",
    ]
    if s.get("kind") == SEQ2SEQ:
        if prompts:  # the encoder's inputs: the tokenized prompts' shapes
            lines.insert(2, f"inputs:    {s.get('inputs', '?')}")
        after_calls = next(i for i, line in enumerate(lines) if line.startswith("calls:")) + 1
        lines[after_calls:after_calls] = _files_lines(s)
    if masked.get("n_elements"):
        lines.append(
            f"padding:   {masked['n_elements']} masked element(s) not judged (never attended); "
            f"max abs diff there {number_text(masked.get('max_abs'))}"
        )
    lines.append(f"time:      {time_text}")
    lines += [f"note:      {note}" for note in candidate_notes(run)]
    return "\n".join(map(terminal_text, lines))  # a saved run's strings: one line of text each


def _task_text(s: Mapping[str, Any]) -> str:
    """ ", task text-classification from config.architectures" ("" for older runs)."""
    if not s.get("task"):
        return ""
    return f", task {s['task']} from {s.get('class_chosen_by', '?')}"


def _calls_text(s: Mapping[str, Any]) -> str:
    if s.get("kind") == SEQ2SEQ:
        return (
            f"{s.get('n_calls', 0)} captured ({s.get('n_encoder', 0)} encoder + "
            f"{s.get('n_prefill', 0)} first decoder step + {s.get('n_decode', 0)} with past), "
            f"max new tokens {s.get('max_new_tokens') or '-'}"
        )
    if s.get("kind") == "encoder":
        return f"{s.get('n_calls', 0)} captured (one forward each, no generate())"
    return (
        f"{s.get('n_calls', 0)} captured ({s.get('n_prefill', 0)} prefill + "
        f"{s.get('n_decode', 0)} decode), max new tokens {s.get('max_new_tokens', '?')}"
    )


def _is_seq2seq(run: ValidationRun) -> bool:
    return run.generation is not None and run.generation.summary.get("kind") == SEQ2SEQ


def _file_of_step(run: ValidationRun) -> dict[str, str]:
    files = (run.generation.summary.get("files") if run.generation else None) or []
    return {label: f["file"] for f in files for label in f["steps"]}


def _files_lines(s: Mapping[str, Any]) -> list[str]:
    """Which file of the export ran which steps, and the steps no file ran."""
    lines = [
        f"file:      {f['file']} ({f['role']}): " + (", ".join(f["steps"]) or "no step")
        for f in s.get("files") or []
    ]
    if s.get("not_validated"):
        lines.append(
            "not run:   " + ", ".join(s["not_validated"]) + " (no file given computes them)"
        )
    return lines


def _shapes(feeds: Mapping[str, Any]) -> str:
    parts = []
    for name in (
        "input_ids",
        *MEDIA_INPUTS,
        "attention_mask",
        "encoder_attention_mask",
        "past_key_values.0.key",
        "past_key_values.0.decoder.key",
    ):
        if name in feeds:
            parts.append(shape_text(feeds[name].shape))
    return " · ".join(parts)


def _worst(comparisons: list[OutputComparison]) -> OutputComparison | None:
    return worst_first(comparisons)[0] if comparisons else None


def _step_status(comparisons: list[OutputComparison]) -> Status:
    worst = _worst(comparisons)
    return Status.MISSING if worst is None else worst.status


def _stat(c: OutputComparison | None, field: str) -> float | None:
    if c is None or c.stats is None:
        return None
    return getattr(c.stats, field)
