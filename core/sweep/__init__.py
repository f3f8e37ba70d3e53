"""Sweeps: many `parity validate` runs from one manifest, each pair in its own process.

manifest.py reads and checks the manifest, plan.py turns each pair into a command line,
execute.py runs one pair (timeout, kill), engines in local.py / on_ray.py schedule them,
summary.py and index.py write the results, driver.py ties the steps together, cli.py is
`parity sweep`. The dashboard's Sweep page reads the folder through results.py.
"""

SCHEMA = "parity.sweep/1"
