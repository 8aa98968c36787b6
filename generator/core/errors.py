"""Errors that reach the user as one line, never as a traceback."""


class UserError(Exception):
    """Bad input from the user: the message says what is wrong and what to do."""


class UsageError(UserError):
    """A command-line option with an invalid value (exit status 2)."""
