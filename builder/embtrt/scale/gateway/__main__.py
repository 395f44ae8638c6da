"""`python -m embtrt.scale.gateway` is not the way to run it."""

import sys

sys.exit("use `embtrt gateway`")
