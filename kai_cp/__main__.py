import sys

from kai_cp.cli import main

sys.exit(main())
