import sys

from hybridmq.spark.audit import main

sys.exit(main())
