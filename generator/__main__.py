"""Run the iteralab CLI as ``python -m iteralab``."""

import sys

from iteralab.cli import main

# Guarded: a build's spawned workers import the main module again, and must not run the command a second time.
if __name__ == "__main__":
    sys.exit(main())
