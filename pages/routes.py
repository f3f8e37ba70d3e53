"""The dashboard's pages, by file: one table that the frame routes with and that every link
and page switch names. Paths are absolute, so the same app runs from a checkout
(`streamlit run app.py`) and from the installed package (`parity dashboard`)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent

RUN = str(HERE / "run.py")
OVERVIEW = str(HERE / "overview.py")
INSPECT = str(HERE / "inspect_page.py")
LAYERS = str(HERE / "layers.py")
TOLERANCES = str(HERE / "tolerances.py")
SWEEP = str(HERE / "sweep.py")

PAGES = (
    (RUN, "Run", ":material/play_arrow:", "run"),
    (OVERVIEW, "Overview", ":material/table_chart:", "overview"),
    (INSPECT, "Inspect", ":material/grid_on:", "inspect"),
    (LAYERS, "Layers", ":material/account_tree:", "layers"),
    (TOLERANCES, "Tolerances", ":material/tune:", "tolerances"),
    (SWEEP, "Sweep", ":material/view_list:", "sweep"),
)
"""(file, title, icon, url path) of each page, in the sidebar's order."""

GENERATION = str(HERE / "generation.py")
GENERATION_PAGE = (GENERATION, "Generation", ":material/text_fields:", "generation")
"""Listed after Layers, only while the current run has free-running generation (causal LMs)."""

SAMPLES = str(HERE / "samples.py")
SAMPLES_PAGE = (SAMPLES, "Samples", ":material/photo_library:", "samples")
"""Listed after Overview, only while the current run was made on a data set (--data)."""

MAIN = str(HERE / "main.py")
"""The script Streamlit runs for `parity dashboard` (app.py runs the same frame)."""
