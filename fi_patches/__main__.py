"""Run the fi_patches command line: ``python -m fi_patches doctor``."""

from fi_patches.cli import main

raise SystemExit(main())
