"""Subcommands of the `kruntimes` command line, one module each."""
