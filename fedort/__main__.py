"""`python -m fedort ...` is the `fedort` command."""

import sys

from fedort.cli import main

sys.exit(main())
