"""istrace command line: one entry, subcommands fronting every part."""
