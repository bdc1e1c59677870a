"""``python -m shared.audit --help``."""

import sys

from shared.audit.cli import main

sys.exit(main())
