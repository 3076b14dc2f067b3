"""kruntimes: a deterministic scheduler that binds Runs to warm Runtime Pods."""

__version__ = "0.1.0"
