"""contextlens-cli: the same use cases as the window (``app.services``), headless.

One module per command group; :mod:`app.cli.main` builds the parser and runs the command.
"""
