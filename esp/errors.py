"""The engine's one user-facing error type."""


class ESPError(ValueError):
    """Bad input or an unusable model: the message is one sentence saying what to do."""
