"""Errors every layer may raise; the CLI turns them into one clear line and exit status 1."""


class HivebatchError(Exception):
    """A problem the user can fix; the message says how."""


class ConfigError(HivebatchError):
    """The configuration file is invalid."""
