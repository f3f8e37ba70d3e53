"""Source: generated input sets (or the user's .npz feeds) and a torch model's outputs."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from parity.errors import UsageError
from parity.load.specs import demo_name
from parity.results import InputSet, OutputComparison, OutputSet, Provenance, RunKind
from parity.run.config import Loaders, RunConfig
from parity.run.progress import ProgressReporter
from parity.settings import Setting
from parity.signature import OnnxSignature
from parity.sources import Case, Source, TorchSide

if TYPE_CHECKING:
    from parity.load.torch_model import TorchModel
    from parity.run.input_binding import InputBinding
    from parity.run.noise_floor_runs import Float64Model, LowModel


def input_sets(config: RunConfig, signature: OnnxSignature) -> Iterator[InputSet]:
    """The user's feeds (one set per file, then one per mapping given to the Python API;
    labelled with what a quantized input's QuantizeLinear clips), else generated sets
    (seeded, dims grown; a quantized input within its calibrated range unless the user's
    --float-range says otherwise, and then labelled likewise): made one at a time, after
    their size is checked against the memory budget (parity.limits.budget)."""
    from parity.limits.budget import MemoryBudget
    from parity.run.inputs import (
        given_input_sets,
        iter_input_files,
        iter_input_sets,
        set_count,
        with_clipping_notes,
    )

    budget = MemoryBudget.of(config.max_memory)
    if config.n_given_sets:
        files = iter_input_files(config.input_files, signature, budget=budget)
        given = given_input_sets(
            config.feeds, signature, first=len(config.input_files), budget=budget
        )
        return with_clipping_notes(itertools.chain(files, given), signature.calibrated)
    generated = iter_input_sets(
        signature,
        dims=config.dims,
        n_sets=set_count(config.n_input_sets, signature),
        seed=config.seed,
        int_ranges=config.int_ranges,
        float_ranges=config.float_ranges,
        float_range=config.float_range,
        budget=budget,
    )
    # a --float-range wider than a quantized input's calibrated range is clipped there too
    return with_clipping_notes(generated, signature.calibrated)


def timed_input_sets(
    config: RunConfig, signature: OnnxSignature, timings: dict[str, float]
) -> Iterator[InputSet]:
    """`input_sets`, the time spent making them added to ``timings["inputs"]`` (the work
    the caller does between them is not counted). The options (--dim names, ranges, sizes)
    are checked now, before the first set is asked for."""
    return _timed(input_sets(config, signature), timings)


def _timed(sets: Iterator[InputSet], timings: dict[str, float]) -> Iterator[InputSet]:
    while True:
        t0 = time.perf_counter()
        input_set = next(sets, None)
        timings["inputs"] = timings.get("inputs", 0.0) + time.perf_counter() - t0
        if input_set is None:
            return
        yield input_set


def set_name(input_set: InputSet) -> str:
    return input_set.label or f"input set {input_set.index}"


class TorchSource(Source):
    """Each case: an input set, and the torch model run on it once."""

    environment_modules: tuple[str, ...] = ()

    def __init__(self, config: RunConfig, loaders: Loaders, report: ProgressReporter) -> None:
        assert config.model is not None
        self.model: str = config.model
        self.n_cases: int | None = config.n_given_sets or config.n_input_sets  # None: 1 or 2
        self.timings: dict[str, float] = {}
        self._config = config
        self._loaders = loaders
        self._report = report
        self._torch: TorchModel | None = None
        self._binding: InputBinding | None = None  # how the last input set was fed
        self._noise_at: tuple[str, ...] = ()  # 16-bit precisions torch also runs at
        self._float64 = config.noise_floor  # every case again in float64 (measure_noise)
        self._float64_ratio: list[float] = []  # float64 / float32 seconds, per set so far
        self._double: Float64Model | None = None  # the float64 copy float64_of made (once)

    runs_other_sizes = True

    def reference_at(self, input_set: InputSet, signature: OnnxSignature) -> OutputSet:
        """Torch's outputs on one more input set (the frozen-at-export search's checks);
        ModelRunError where torch cannot run at that size."""
        from parity.run.runner import run_torch

        return run_torch(self._loaded, input_set, signature)

    def reference_again(
        self, input_set: InputSet, signature: OnnxSignature
    ) -> dict[str, np.ndarray]:
        """Torch's outputs on a case again (the model's weights may have been changed)."""
        from parity.run.runner import run_torch

        return dict(run_torch(self._loaded, input_set, signature).arrays)

    @property
    def _loaded(self) -> TorchModel:
        """The torch model, which cases() loads before anything runs it."""
        assert self._torch is not None, "the torch model is loaded by cases()"
        return self._torch

    @property
    def torch_model(self) -> TorchModel | None:
        """The loaded TorchModel (re-traced for a legacy export's source lines), or None."""
        return self._torch

    def float64_of(
        self, input_set: InputSet, signature: OnnxSignature
    ) -> tuple[Mapping[str, np.ndarray] | None, str]:
        """Torch in float64 on one input set (the copy made once, checked against
        --max-memory: BudgetError), as --noise-floor runs it per case."""
        from parity.run.noise_floor_runs import float64_model, run_float64

        if self._torch is None:
            return None, "noise floor not measured: the torch model was not loaded"
        if self._double is None:
            from parity.limits.budget import MemoryBudget

            budget = MemoryBudget.of(self._config.max_memory)
            self._double = float64_model(self._torch, budget)
        if self._double.model is None:
            return None, self._double.note
        return run_float64(self._double.model, input_set, signature)

    def measure_noise(self) -> None:
        self._float64 = True

    def measure_noise_at(self, precisions: Collection[str]) -> None:
        """--noise-floor: also run torch at these precisions ("float16", "bfloat16": the
        candidates' own), so their floor is torch's error at that precision."""
        self._noise_at = tuple(sorted(set(precisions)))

    def default_onnx(self, workdir: Callable[[], Path]) -> str:
        if (demo := demo_name(self.model)) is not None:
            from parity.load.demos import demo_onnx_path

            return str(demo_onnx_path(demo))
        raise UsageError(
            "is required (only a demo:NAME model has a built-in ONNX file)", setting=Setting("onnx")
        )

    def cases(
        self, signature: OnnxSignature, parts: Mapping[str, OnnxSignature] | None = None
    ) -> Iterator[Case]:

        self.timings.update(load_model=0.0, inputs=0.0, torch=0.0)
        sets = timed_input_sets(self._config, signature, self.timings)  # refuses typos first
        if not self.n_cases:
            from parity.run.inputs import set_count

            self.n_cases = set_count(None, signature)
        t0 = time.perf_counter()
        self._report("load", f"loading model {self.model}", 0.05)
        self._torch = self._loaders.load_torch_model(
            self.model, weights=self._config.weights, max_memory=self._config.max_memory
        )
        self.timings["load_model"] = time.perf_counter() - t0
        if not self._config.n_given_sets:  # the model's own image size, where it says one
            from parity.run.size_hint import image_size, with_image_size

            size = image_size(self._torch)
            dims = with_image_size(signature, self._config.dims, size) if size else None
            if dims and dims != dict(self._config.dims):
                sized = replace(self._config, dims=dims)
                sets = timed_input_sets(sized, signature, self.timings)
        double = None
        lows: dict[str, LowModel | str] = {}
        if self._float64:
            from parity.limits.budget import MemoryBudget
            from parity.run.noise_floor_runs import float64_model, low_model

            double = float64_model(self._torch, MemoryBudget.of(self._config.max_memory))
            self.timings["float64"] = 0.0
            lows = {p: low_model(self._torch, p) for p in self._noise_at}
        for input_set, reference in self._references(sets, signature):
            case = Case(input_set=input_set, reference=reference)
            if double is not None:
                case = self._with_float64(case, double, signature)
            if lows:
                case = self._with_low(case, lows, signature)
            yield case

    def _references(
        self, sets: Iterator[InputSet], signature: OnnxSignature
    ) -> Iterator[tuple[InputSet, OutputSet]]:
        """(input set, torch's outputs), one set at a time. Where the second size is Parity's
        default (no --input-sets) and torch itself cannot run at it (a .pt2 exported at a
        static batch), the run keeps the first size and its label says why."""
        from parity.errors import ModelRunError
        from parity.run.runner import model_binding, run_torch

        def run(input_set: InputSet) -> OutputSet:
            self._report("torch", f"torch on {set_name(input_set)}", None)
            self._binding = model_binding(self._loaded, input_set.feeds)
            reference = run_torch(self._loaded, input_set, signature)
            self.timings["torch"] += reference.seconds
            return reference

        if self._config.n_input_sets is not None or self._config.n_given_sets:
            yield from ((s, run(s)) for s in sets)
            return
        made = list(sets)  # the default: one or two sets
        done = [(made[0], run(made[0]))]
        for extra in made[1:]:
            try:
                done.append((extra, run(extra)))
            except ModelRunError as exc:
                first, ref = done[0]
                why = f"one size only: the torch model does not run at set {extra.index}'s "
                why += f"sizes ({exc.message})"
                done = [(replace(first, label=f"{first.label}; {why}"), ref)]
                self.n_cases = 1
                break
        yield from done

    def _with_low(
        self, case: Case, lows: Mapping[str, LowModel | str], signature: OnnxSignature
    ) -> Case:
        """The case with torch's outputs at each 16-bit precision a candidate computes in."""
        from dataclasses import replace

        from parity.results import PrecisionRun
        from parity.run.noise_floor_runs import run_low

        runs = {}
        for precision, low in lows.items():
            if isinstance(low, str):  # why it cannot be run
                runs[precision] = PrecisionRun(None, note=low)
                continue
            self._report("torch", f"torch in {precision} on {set_name(case.input_set)}", None)
            t0 = time.perf_counter()
            arrays, note = run_low(low, case.input_set, signature, case.reference.seconds)
            self.timings["float64"] += time.perf_counter() - t0
            runs[precision] = PrecisionRun(arrays, low.emulated, note)
        return replace(case, at_precision=runs)

    def _float64_estimate(self, case: Case) -> str:
        """What the float64 pass on this set will take, said before it starts: its float32
        time times the float64/float32 ratio of the sets before (the first set: its float32
        time, and that float64 is often several times slower on a CPU)."""
        name = set_name(case.input_set)
        took = case.reference.seconds
        if not self._float64_ratio:
            return f"torch in float64 on {name} (float32 took {took:.1f} s; float64 is slower)"
        ratio = max(self._float64_ratio)
        return f"torch in float64 on {name}: about {ratio * took:.0f} s ({ratio:.1f}x float32)"

    def _with_float64(self, case: Case, double: Float64Model, signature: OnnxSignature) -> Case:
        """The case with the float64 run's outputs (or the note saying why there are none)."""
        from dataclasses import replace

        from parity.run.noise_floor_runs import run_float64

        if double.model is None:
            return replace(case, float64_note=double.note)
        self._report("torch", self._float64_estimate(case), None)
        t0 = time.perf_counter()
        arrays, note = run_float64(double.model, case.input_set, signature)
        self.timings["float64"] += time.perf_counter() - t0
        self._float64_ratio.append((time.perf_counter() - t0) / max(case.reference.seconds, 1e-6))
        return replace(case, float64=arrays, float64_note=note)

    def torch_side(self) -> TorchSide:
        """The loaded model, run as the cases were (parity.run.runner.run_torch)."""
        if self._torch is None:
            return TorchSide(None, missing="the torch model was not loaded")
        return TorchSide(self._torch)

    def provenance(self) -> Provenance:
        return Provenance(
            kind=RunKind.TORCH,
            model_sha256=getattr(self._torch, "sha256", None),
            seed=self._config.seed,
            weights_file=self._config.weights,
            inputs_by=getattr(self._binding, "by", None),
            inputs_note=getattr(self._binding, "note", None) or None,
        )

    def generation(
        self, comparisons: Sequence[OutputComparison], timings: Mapping[str, float]
    ) -> None:
        return None
