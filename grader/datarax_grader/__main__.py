"""``python -m datarax_grader``: the same as the ``datarax-grade`` command."""

import sys

from datarax_grader.grade import main

if __name__ == "__main__":
    sys.exit(main())
