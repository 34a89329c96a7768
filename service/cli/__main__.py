"""``python -m service.cli``: the ``xinserve`` command."""

import sys

from service.cli import main

sys.exit(main())
