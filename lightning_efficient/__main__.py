"""``python -m lightning_efficient demo`` (same as the ``lightning-efficient`` console script)."""

import sys

from lightning_efficient.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
