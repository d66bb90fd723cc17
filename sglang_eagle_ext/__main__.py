"""``python -m sglang_eagle_ext COMMAND``: the ``sglang-eagle`` command line."""

import sys

from sglang_eagle_ext.cli import main

sys.exit(main())
