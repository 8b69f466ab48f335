"""``python -m bench``: the two studies' command line (`bench.cli`)."""

from bench.cli import main

main()
