"""`python -m core validate ...` is `parity validate ...`."""

import sys

from core.cli import main

sys.exit(main())
