"""The kinds of work the runner measures, one module each, picked once by the campaign's [workload] kind.

A workload answers only what differs between kinds (see ../shared/design/workloads.md): its settings, the model check,
loading, the unit of work in the measured window (`Work`), its phases beyond the shared ones, what a trial writes with
ids and its quality. The runner keeps the protocol, rotation, stages, phases, failures, resume and records.
"""

from __future__ import annotations

from iteralab.workloads import adapt, classify, generate, serve

WORKLOADS = {module.KIND: module for module in (classify, generate, adapt, serve)}
# Kinds the design names that this version does not measure yet, each with what it would be.
PLANNED: dict[str, str] = {}
