"""`python -m ctu.cli`: the `ctu` command."""

from ctu.cli import main

main()
