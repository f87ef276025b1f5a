import sys

from ascendpipe.cli.main import main

sys.exit(main())
