"""User-facing errors: one line that names the problem and what to do.

Anything raised as :class:`UserError` is printed by the CLI as a single line without a
traceback (``--debug`` shows it). Everything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake in the user's input (config, data files, arguments)."""


class ConfigError(UserError):
    """An unknown config key or an invalid value."""


class DataError(UserError):
    """A missing, truncated or corrupted dataset file."""
