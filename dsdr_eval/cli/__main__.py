"""``python -m dsdr_eval.cli ...`` is ``dsdr-eval ...``."""

import sys

from dsdr_eval.cli import main

sys.exit(main())
