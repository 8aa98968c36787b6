"""Serving campaigns (#64): the engine process, the load generator, the request rows and their figures."""
