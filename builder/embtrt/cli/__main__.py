"""`python -m embtrt.cli`."""

from . import main

main()
