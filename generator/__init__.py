"""IteraGPU Lab: offline GPU benchmark runner and static evidence-site generator.

From Python: ``iteralab.open_runs(path)`` reads a runs folder (trials, campaigns, manifests, rentals as pandas tables,
``decide`` and ``chart``), and ``iteralab.PhaseClock(device)`` times any code's phases as the runner does.
"""

import importlib as _importlib

__version__ = "0.1.0"

__all__ = ["PhaseClock", "Runs", "open_runs"]

# Each public name and the module it lives in, imported at first use (PEP 562): `import iteralab` stays light, with
# neither torch, pandas nor altair, and the CLI starting through this package pays for none of them.
_PUBLIC = {"open_runs": "iteralab.api", "Runs": "iteralab.api", "PhaseClock": "iteralab.machine.phases"}


def __getattr__(name: str):
    """Import a public name's module at its first use."""
    if name in _PUBLIC:
        return getattr(_importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'iteralab' has no attribute {name!r}")


def __dir__() -> list[str]:
    """List the public names beside the module's own, though not imported yet."""
    return sorted([*globals(), *__all__])
