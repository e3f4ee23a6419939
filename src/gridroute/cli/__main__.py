"""`python -m gridroute.cli`: how the local grid starts its child processes."""

from gridroute.cli import main

main()
