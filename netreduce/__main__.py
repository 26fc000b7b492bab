"""``python -m netreduce``: the same as the ``netreduce`` command."""

import sys

from .cli import main

sys.exit(main())
