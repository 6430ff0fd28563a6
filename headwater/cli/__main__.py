"""``python -m headwater.cli``: what the ``headwater`` script runs."""

import sys

from headwater.cli.main import main

sys.exit(main())
