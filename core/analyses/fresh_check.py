"""Suggested tolerances that hold out of sample: fitted on the run's input sets, then checked
on fresh ones before they are shown (`suggest_checked`, a SuggestedTolerances).

A tolerance fitted to n input sets passes them by construction; it says nothing about the next
input, and the error of a real export grows with its input's size (a clean file's embedding
error 1.7e-6 at batch 2, 8.0e-6 at batch 8). So the run is made again (the same pipeline,
the same model and files) on 2n fresh sets: another seed, and every dynamic dim past the sizes
the run used (set 0 at the size the run's set n would have had, then grown by the usual rule,
parity.run.inputs). The first n (A) check the fitted tolerance; an output that fails there is
fitted again on the run's sets and A together, with more margin (the growth from the run's
sizes to A's allowed once more; on the rounding basis the next k of 2, 5, 10), and checked on
the other n (B) it never saw; one that fails B too gets none, said why. `checked_on` lists only
sets a shown tolerance was not fitted to.

No tolerance is suggested for an output with a bug finding (parity.show.findings: a birth
--layers confirmed, or an error far past the noise floor), nor, on the rounding basis, for
one whose error is not rounding. The fresh sets always measure the noise floor: on the
observed basis (no --noise-floor) a tolerance is shown only where the fresh sets' error is
rounding, and withheld, with the reason, where it is not or no floor could be measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from parity.errors import ParityError
from parity.judge.noise_floor import ROUNDING_RATIO, noise_rank, noise_sentence
from parity.judge.suggest import (
    DEFAULT_MARGIN,
    NOISE_MULTIPLES,
    has_noise,
    round_up_2sig,
    round_up_125,
    suggest_noise_tolerances,
    suggest_tolerances,
)
from parity.results import (
    InputSet,
    OutputComparison,
    RunKind,
    SuggestedTolerances,
    ValidationRun,
)
from parity.run.config import RunConfig
from parity.tolerances import Tolerance

__all__ = ["FRESH_SEED_OFFSET", "fresh_config", "suggest_checked", "unchecked_reason"]

FRESH_SEED_OFFSET = 1000  # the fresh sets' seed: the run's + this (another seed, said)
BUG = "a bug (see the findings): no tolerance is suggested for it"


def unchecked_reason(config: RunConfig | None) -> str | None:
    """Why a run with these settings cannot be made again on fresh inputs (None: it can)."""
    if config is None:
        return "the run's settings are not known (a hand-edited or old saved run)"
    if config.kind is RunKind.REFERENCE:
        return "stored reference outputs cannot be computed for new inputs"
    if config.kind is RunKind.HF_GENERATE:
        return "an hf: run's inputs are captured generate() steps, not generated sets"
    if config.n_given_sets:
        return "the run's inputs were given (files or arrays), and fresh ones cannot be drawn"
    return None


def fresh_config(
    config: RunConfig, run: ValidationRun, *, n_sets: int, noise_floor: bool
) -> RunConfig:
    """The run's settings at `n_sets` fresh input sets: seed + FRESH_SEED_OFFSET, every
    dynamic dim starting where the run's sets stopped; no --layers; its own tolerances."""
    from parity.run.inputs import default_dim_size, grown_dim_size, unnamed_dims

    fitted = max(len(run.input_sets), 1)
    dims = dict(config.dims)
    if run.signature is not None:
        for name in (*run.signature.symbolic_dims, *unnamed_dims(run.signature)):
            key = name
            base = dims.get(key, default_dim_size(None if ":" in key else key))
            dims[key] = grown_dim_size(int(base), fitted)
    return replace(
        config,
        dims=dims,
        n_input_sets=n_sets,
        seed=config.seed + FRESH_SEED_OFFSET,
        layers=False,
        noise_floor=noise_floor,
        suggest=False,
        repro=None,
    )


def describe(s: InputSet, seed: int) -> str:
    """A fresh set as `checked_on` names it: ``seed 1000, set 2: x 6x4x96``."""
    shapes = ", ".join(f"{n} {'x'.join(str(d) for d in shp)}" for n, shp in s.shapes().items())
    return f"seed {seed}, set {s.index}: {shapes}"


def suggest_checked(
    run: ValidationRun,
    config: RunConfig | None,
    *,
    rerun: Callable[[RunConfig], ValidationRun],
    basis: str | None = None,
    margin: float = DEFAULT_MARGIN,
) -> SuggestedTolerances:
    """Tolerances for `run`'s outputs, checked on fresh input sets (module doc). `config`:
    the settings that made the run (None: not known, nothing can be checked). `rerun`: makes
    a run of a config through the pipeline (the analysis context's). `basis`: "rounding"
    (the default when the run measured its noise floor) or "observed"."""
    basis = basis or ("rounding" if has_noise(run) else "observed")
    fitted, withheld, k = _fit(run, basis, margin)
    n = max(len(run.input_sets), 1)
    empty = SuggestedTolerances({}, basis, (), withheld, fitted_on=n, k=k)
    if not fitted:
        return empty
    why = unchecked_reason(config)
    if why is None:
        assert config is not None  # unchecked_reason is None only for known settings
        # the floor is measured on the fresh sets whatever the basis: without it nothing
        # tells a bug's error from rounding, and an observed tolerance would pass the bug
        fresh_cfg = fresh_config(config, run, n_sets=2 * n, noise_floor=True)
        fresh_cfg = replace(fresh_cfg, tolerances=_with(run, fitted).tolerances)
        try:
            fresh = rerun(fresh_cfg)
        except ParityError as exc:
            why = f"the run could not be made on fresh inputs ({exc})"
        else:
            broken = [i.error for i in fresh.infos if i.error is not None]
            if broken:
                why = f"ONNX Runtime could not run the fresh inputs ({broken[0]})"
    if why is not None:
        withheld.update({name: f"not checked on fresh inputs: {why}" for name in fitted})
        return replace(empty, withheld=withheld)
    first = {s.index for s in fresh.input_sets[:n]}
    a = [c for c in fresh.outputs if c.input_set in first]
    b = [c for c in fresh.outputs if c.input_set not in first]
    shown: dict[str, Tolerance] = {}
    refitted = False
    for name, tolerance in fitted.items():
        if (bug := not_rounding_on(fresh.outputs, name)) is not None:
            withheld[name] = bug
            continue
        if _passes(a, name, tolerance) and _passes(b, name, tolerance):
            shown[name] = tolerance
            continue
        again = _refit(run.outputs, a, name, tolerance, basis, margin, k)
        if isinstance(again, str):
            withheld[name] = again
        elif not _passes(a, name, again):
            need = _needed(a, name, again.rtol)
            withheld[name] = (
                f"refitted on fresh input sets it still fails them (atol {need:.2g} needed): "
                "not suggested"
            )
        elif _passes(b, name, again):
            shown[name], refitted = again, True
        else:
            need = _needed(b, name, again.rtol)
            withheld[name] = (
                f"fitted on {n} input set(s) and refitted on {n} fresh one(s), it still fails "
                f"on {n} more fresh set(s) (they need atol {need:.2g}): the error grows with "
                "the input; no tolerance that holds could be shown"
            )
    seed = fresh_cfg.seed
    used = fresh.input_sets[n:] if refitted else fresh.input_sets
    checked = tuple(describe(s, seed) for s in used) if shown else ()
    if refitted and basis == "rounding":
        k = next_multiple(k)  # the largest k a shown tolerance uses
    return SuggestedTolerances(shown, basis, checked, withheld, fitted_on=n, k=k)


def not_rounding_on(rows: Sequence[OutputComparison], name: str) -> str | None:
    """Why no tolerance may be shown for `name` from what the fresh sets measured (None: its
    error there is rounding): not rounding against the floor, or no floor measured at all
    (then nothing tells its error from a bug's)."""
    mine = [c for c in _rows(rows, name) if c.ref_dtype is not None and "float" in c.ref_dtype]
    if not mine:
        return None  # integers and bools are judged exactly: no rounding to tell apart
    noises = [c.noise for c in mine if c.noise is not None]
    if not noises:
        why = next(
            (n for c in mine for n in c.notes if "noise floor not measured" in n),
            "noise floor not measured",
        )
        return (
            f"{why.removeprefix('noise floor not measured: ')}: without a noise floor nothing "
            "tells its error from a bug's, so no tolerance is suggested"
        )
    worst = max(noises, key=noise_rank)
    if noise_rank(worst) <= ROUNDING_RATIO:
        return None
    return (
        f"on fresh input sets its error is not rounding ({noise_sentence(worst)}), a bug no "
        "tolerance should pass: not suggested"
    )


def _with(run: ValidationRun, fitted: dict[str, Tolerance]) -> ValidationRun:
    tolerances = run.tolerances
    for name, tolerance in fitted.items():
        tolerances = tolerances.with_output(name, tolerance)
    return replace(run, tolerances=tolerances)


def _fit(
    run: ValidationRun, basis: str, margin: float
) -> tuple[dict[str, Tolerance], dict[str, str], float | None]:
    """The tolerances fitted on the run's own sets, why others got none, and k (rounding)."""
    from parity.show.findings import bug_outputs

    bugs = {name for _, name in bug_outputs(run) if name is not None}
    fitted: dict[str, Tolerance] = {}
    withheld: dict[str, str] = {name: BUG for name in run.output_names if name in bugs}
    if basis == "rounding":
        s = suggest_noise_tolerances(run)
        for name in run.output_names:
            if name in bugs:
                continue
            if name not in s.atols:
                withheld[name] = s.notes.get(name, "rounding noise not measured")
            elif noise_rank(s.noise[name]) > ROUNDING_RATIO:
                withheld[name] = "its error is not rounding: no rounding tolerance is suggested"
            elif not s.passes[name]:
                withheld[name] = f"fails even at {s.k:g}x its rounding noise"
            else:
                fitted[name] = Tolerance(atol=s.atols[name], rtol=0.0)
        return fitted, withheld, s.k
    fit = suggest_tolerances(run, margin=margin)
    for name in run.output_names:
        if name in bugs:
            continue
        found = fit.min_atols.get(name)
        if found is None or found == 0.0:
            if name in fit.notes:
                withheld[name] = fit.notes[name]
            continue
        fitted[name] = fit.tolerances.for_output(name)
    return fitted, withheld, None


def _rows(rows: Sequence[OutputComparison], name: str) -> list[OutputComparison]:
    return [c for c in rows if c.name == name]


def _passes(rows: Sequence[OutputComparison], name: str, tolerance: Tolerance) -> bool:
    mine = _rows(rows, name)
    return bool(mine) and all(
        c.can_rejudge and c.profile is not None and c.profile.passes(tolerance) for c in mine
    )


def _needed(rows: Sequence[OutputComparison], name: str, rtol: float) -> float:
    """The largest smallest-passing atol over `rows` of `name` (inf: none passes)."""
    worst = 0.0
    for c in _rows(rows, name):
        m = c.profile.min_atol(rtol) if c.can_rejudge and c.profile is not None else None
        worst = max(worst, float("inf") if m is None else float(m))
    return worst


def _refit(
    own: Sequence[OutputComparison],
    a: Sequence[OutputComparison],
    name: str,
    tolerance: Tolerance,
    basis: str,
    margin: float,
    k: float | None,
) -> Tolerance | str:
    """The tolerance fitted again on the run's sets and fresh half A, or why it cannot be.
    The margin for what it has not seen: the error (or floor) grew by g from the run's sizes
    to A's, so B, one step larger again, is allowed g more (g >= 1) on top of the margin."""
    mine, fresh = _rows(own, name), _rows(a, name)
    if basis == "rounding":
        mine_noise = [c.noise for c in mine if c.noise is not None]
        fresh_noise = [c.noise for c in fresh if c.noise is not None]
        if len(mine_noise) < len(mine) or len(fresh_noise) < len(fresh):
            return "rounding noise not measured on the fresh input sets: not suggested"
        worst = max((*mine_noise, *fresh_noise), key=noise_rank)
        if noise_rank(worst) > ROUNDING_RATIO:
            return (
                f"on fresh input sets its error is not rounding ({noise_sentence(worst)}): "
                "no rounding tolerance is suggested"
            )
        before = max(n.torch_error for n in mine_noise)
        after = max(n.torch_error for n in fresh_noise)
        floor = max(before, after) * _growth(before, after)
        return Tolerance(atol=round_up_2sig(next_multiple(k) * floor), rtol=0.0)
    before, after = _needed(mine, name, tolerance.rtol), _needed(fresh, name, tolerance.rtol)
    if float("inf") in (before, after):
        return "on fresh input sets no atol passes it (NaN/Inf, shape or type): not suggested"
    need = max(before, after) * _growth(before, after)
    return Tolerance(atol=round_up_125(margin * need), rtol=tolerance.rtol)


def next_multiple(k: float | None) -> float:
    """The k a refit uses: the next of NOISE_MULTIPLES above the fitted one (ONNX's own
    error against float64 can grow with the input while torch's floor does not), at most
    ROUNDING_RATIO: past it the error would not be rounding any more."""
    return next((m for m in NOISE_MULTIPLES if m > (k or 0.0)), NOISE_MULTIPLES[-1])


def _growth(before: float, after: float) -> float:
    """How much larger the fresh sets' figure is than the run's (at least 1)."""
    return max(after / before, 1.0) if before > 0 else 1.0
