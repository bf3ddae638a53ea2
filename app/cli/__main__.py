"""``python -m app.cli``: the command line, as ``contextlens-cli``."""

import sys

from app.cli.main import main

sys.exit(main())
