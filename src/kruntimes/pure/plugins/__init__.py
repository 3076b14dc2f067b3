"""The built-in plugins, one module each, every one with its pure predicate beside it.

Each module imports the framework's protocols (never the other way round) and
ends with a conformance line checked by mypy. The default set and the filter
order live in one place: :mod:`kruntimes.pure.plugins.registry`.
"""
