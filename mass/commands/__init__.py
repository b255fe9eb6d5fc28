"""Subcommands of the `mass` CLI; see :mod:`mass.cli` for the module contract."""
