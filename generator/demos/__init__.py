"""The embedded demo: one module per kind of work, and the whole demo that runs them."""
