"""Analyses: the optional analyses of the one loop (parity.pipeline).

Each is one module with one `Analysis` (parity.analyses.interface): `wanted(config)` says whether
the run's `RunConfig` asks for it, `before(prepare)` may hook into the loop's cases (the noise
floor judges each case against a float64 run), and `apply(run, context)` returns the run with
its evidence added. The pipeline runs the wanted ones in the order of
parity.analyses.order.ANALYSES, each drawing on the run's one deadline and memory budget; the
fronts (API, CLI, dashboard) only set `RunConfig` fields and render the run. An analysis that
was asked for and could not run says why in `ValidationRun.analyses` (never silently absent).
"""
