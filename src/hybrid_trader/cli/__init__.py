"""The ``hybrid-trader`` command line: one module per command group."""
