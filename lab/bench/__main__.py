"""Entry point of ``python -m lab.bench``."""

import sys

from lab.bench.cli import main

if __name__ == "__main__":  # host processes import this module too; only the bench runs it
    sys.exit(main())
