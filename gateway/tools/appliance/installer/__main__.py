"""``python -m gateway.tools.appliance.installer``: the installer's command line."""

import sys

from .command import main

sys.exit(main())
