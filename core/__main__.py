"""`python -m parity validate ...` is `parity validate ...`."""

from parity.cli.supervise import console

console()
