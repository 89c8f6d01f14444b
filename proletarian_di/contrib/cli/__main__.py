"""`python -m proletarian_di.cli`: the same as the `proletarian-di` command."""

from . import main

main()
