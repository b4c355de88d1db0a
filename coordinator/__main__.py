"""`python -m coordinator ...` is `fedort coordinator ...`."""

import sys

from edge_client.cli import main

sys.exit(main(["coordinator", *sys.argv[1:]]))
