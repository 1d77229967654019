import sys

from dpviz.app.cli import main

sys.exit(main())
