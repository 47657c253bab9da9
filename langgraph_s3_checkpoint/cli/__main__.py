"""``python -m langgraph_s3_checkpoint.cli``: the ``langgraph-s3`` command without its entry point."""

import sys

from . import main

sys.exit(main())
