"""The record store: append-only records, their schemas, and the read-only views built from them."""
