"""Element-wise comparison of one output: statuses, statistics, and the re-judge profile.

STUB — owned by the compare-engine work. Contract:

compare_outputs(ref, onnx, *, name, input_set, tolerance, chunk_elements=...) -> OutputComparison
    ref/onnx: np.ndarray or None (None = missing on that side -> Status.MISSING).
    Shape differs -> SHAPE_MISMATCH, dtype differs -> DTYPE_MISMATCH (stats still computed
    when shapes match, so the user sees how far off a dtype-mismatched output is).
    Otherwise PASS/FAIL by the pass rule, chunk by chunk, bounded extra memory.

ErrorProfile: frozen dataclass of numpy arrays/scalars only (saved runs store it without
pickle via to_arrays()/from_arrays()), answering for ANY Tolerance without raw tensors:
    min_atol(rtol) -> float | None   exact smallest atol that passes (None: never, e.g. NaN)
    passes(tol) -> bool              exact
    n_mismatch(tol) -> int           exact at rtol == 0 bin edges; documented estimate otherwise
    mismatch_curve(atols, rtol) -> np.ndarray   fraction of mismatching elements per atol
"""
