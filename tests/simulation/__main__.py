"""``python -m tests.simulation``: see :mod:`tests.simulation.cli`."""

import sys

from tests.simulation.cli import main

sys.exit(main())
