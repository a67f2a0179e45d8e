"""`python -m rafka`: the `rafka` command line."""

from rafka.cli.main import main

raise SystemExit(main())
