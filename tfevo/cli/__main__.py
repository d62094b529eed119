"""``python -m tfevo.cli``."""

import sys

from tfevo.cli import main

sys.exit(main())
