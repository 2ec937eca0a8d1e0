"""``python -m quantax_lite train ...``: the same as the ``quantax-lite`` command."""
import sys

from quantax_lite.cli.command import main

sys.exit(main())
