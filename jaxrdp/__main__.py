import sys

from jaxrdp.cli import main

sys.exit(main())
