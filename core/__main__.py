"""`python -m parity validate ...` is `parity validate ...`."""

import sys

from parity.cli import main

sys.exit(main())
