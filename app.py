"""Parity dashboard from a checkout: `streamlit run app.py` (installed: `parity dashboard`).

The frame and the pages are the package `parity.dashboard` (the folder pages/).
"""

from parity.dashboard.frame import main

main()
