"""``python -m shared.bulk --help``."""

import sys

from shared.bulk.cli import main

sys.exit(main())
