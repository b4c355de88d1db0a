"""`python -m fedort ...` is the `fedort` command."""

from fedort.cli import console_main

console_main()
