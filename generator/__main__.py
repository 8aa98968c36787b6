"""Run the iteralab CLI as ``python -m iteralab``."""

import sys

from iteralab.cli import main

sys.exit(main())
