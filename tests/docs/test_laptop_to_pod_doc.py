"""docs/laptop_to_pod.md's "What to check first" and "From a bucket to a pod" snippets
run under launch_local.

Each snippet is read from the page itself, saved as a script and run on a local
cluster of 2 processes, the rehearsal the page recommends; it must not call
``jax.distributed.initialize`` a second time there.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from datarax.distributed import launch_local
from datarax.pipeline import Documents

pytestmark = pytest.mark.multihost
PAGE = Path(__file__).parents[2] / "docs" / "laptop_to_pod.md"


def test_what_to_check_first_runs_under_launch_local(tmp_path: Path) -> None:
    section = PAGE.read_text().split("## What to check first", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    script = tmp_path / "check_first.py"
    script.write_text(snippet.group(1))
    runs = launch_local(script, num_processes=2, devices_per_process=2, timeout_s=60)
    assert "process 0 of 2: 2 of 4 devices" in runs[0].output
    assert "process 1 of 2: 2 of 4 devices" in runs[1].output
    assert "0-127" in runs[0].output and "128-255" in runs[0].output  # the ledger's rows


def test_from_a_bucket_to_a_pod_runs_under_launch_local(tmp_path: Path) -> None:
    section = PAGE.read_text().split("## From a bucket to a pod", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None and 'BUCKET = "gs://my-bucket/corpus"' in snippet.group(1)
    bucket = tmp_path / "corpus"
    (bucket / "raw").mkdir(parents=True)
    rng = np.random.default_rng(0)
    words = ["sharding", "data", "across", "hosts", "with", "jax", "é", "tokens"]
    texts = [" ".join(rng.choice(words, rng.integers(1, 40))) for _ in range(300)]
    for part, chunk in enumerate((texts[:120], texts[120:])):
        with gzip.open(bucket / "raw" / f"part-{part}.jsonl.gz", "wt", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": text, "id": k}) + "\n" for k, text in enumerate(chunk))
    script = tmp_path / "from_a_bucket.py"
    here = Path(__file__).parents[1]
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(here)!r})\n"
        "from _support.store_checks import shared_scheme\nshared_scheme()\n"
        + snippet.group(1).replace("gs://my-bucket/corpus", f"shared://{bucket}")
    )
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    runs = launch_local(script, num_processes=2, devices_per_process=2, timeout_s=120, env=cache)
    for process, run in enumerate(runs):
        assert f"process {process}: 300 documents, batch (16, 256)" in run.output
    store = Documents(str(bucket / "store"), cache_dir=tmp_path / "cache")
    for document, text in zip(store.read(np.arange(300)), texts, strict=True):
        assert document.tolist() == [*text.encode("utf-8"), 256]
