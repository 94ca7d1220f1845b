import sys

from ticdc_sink.cli import main

sys.exit(main())
