"""``python -m grader`` is ``jaxgrade``."""

import sys

from grader.cli import main

sys.exit(main())
