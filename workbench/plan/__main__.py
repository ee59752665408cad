"""``python -m workbench.plan``: see :mod:`workbench.plan`."""
import sys

from workbench.plan.cli import main

sys.exit(main())
