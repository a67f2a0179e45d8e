"""The `rafka` command line: one module per command in `cli.commands`, the entry point in
`cli.main`. It sits on top of `actors` and `pipelines`, which know nothing of it."""
