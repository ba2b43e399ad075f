"""The `istrace` command line: one module per subcommand (main.py dispatches)."""

VERSION = "0.1.0"  # pyproject.toml's [project] version, the same (a test holds them equal)
