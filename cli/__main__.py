"""`python -m cli`: the `rafka` command line."""

import sys

from cli.main import main

sys.exit(main())
