"""`parity` — the validation core, headless, for terminals and CI.

Exit codes: 0 every output passes, 1 some output fails, 2 the run could not be made.

definition.py holds every flag as one table and builds the parser from it (parser.py: a usage
error in one line, with a did-you-mean); values.py turns flag values into settings; run.py
executes a command; output.py writes its reports and its terminal text.
"""

from __future__ import annotations

from parity.cli.definition import build_parser
from parity.cli.parser import Parser, close_match, unknown_arguments
from parity.cli.run import main
from parity.cli.values import (
    parse_dims,
    parse_float_ranges,
    parse_int_ranges,
    parse_list,
    tolerances_from_args,
)

__all__ = [
    "Parser",
    "build_parser",
    "close_match",
    "main",
    "parse_dims",
    "parse_float_ranges",
    "parse_int_ranges",
    "parse_list",
    "tolerances_from_args",
    "unknown_arguments",
]
