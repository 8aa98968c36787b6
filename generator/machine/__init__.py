"""The machine a trial runs on: its facts, devices and cards, vendors' tools, what else ran, the phase clock, its rental."""
