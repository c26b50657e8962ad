"""`python -m attnlab.gpubench`: every section in one run (see attnlab.gpubench.run)."""

from attnlab.gpubench.run import main

raise SystemExit(main())
