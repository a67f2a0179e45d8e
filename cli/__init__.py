"""The `rafka` command line: one module per command in `rafka.cli.commands`, the entry point in
`rafka.cli.main`. It sits on top of `actors` and `pipelines`, which know nothing of it."""
