"""``python -m grader`` is ``jaxgrade``."""

import sys

from grader.entry import main

sys.exit(main())
