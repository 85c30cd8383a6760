"""``python -m datarax_course.traces [FOLDER]``: records the stored profiles again.

On 8 accelerators where the machine has them, else on 8 simulated CPU devices; the files
go to FOLDER, by default beside this module (replacing the stored ones).
"""

from __future__ import annotations

import sys
from pathlib import Path

from datarax.distributed import setup_devices


def main(argv: list[str]) -> int:
    print(setup_devices(8).message)
    from datarax_course.traces._record import record

    folder = Path(argv[0]) if argv else Path(__file__).parent
    folder.mkdir(parents=True, exist_ok=True)
    for path in record(folder):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
