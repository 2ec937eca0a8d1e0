"""``python -m quantax_lite train ...``: the same as the ``quantax-lite`` command."""
import sys

from .cli import main

sys.exit(main())
