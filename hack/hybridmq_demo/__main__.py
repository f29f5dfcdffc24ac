"""``python -m hybridmq_demo``."""

import sys

from hybridmq_demo.main import main

sys.exit(main())
