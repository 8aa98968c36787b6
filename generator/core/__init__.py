"""Errors, files and the pieces every stage shares."""
