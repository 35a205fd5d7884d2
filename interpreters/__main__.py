"""``python -m interpreters``: the ``opdsl`` command."""

import sys

from interpreters.cli import main

if __name__ == "__main__":
    sys.exit(main())
