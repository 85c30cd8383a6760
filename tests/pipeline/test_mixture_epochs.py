"""A Pipeline over packed rows of a Mixture reads each epoch's documents: the epochs go on
where the last stopped, the state carries the epoch's basis, and a pipeline built over new
weights resumes a saved state with nothing repeated or skipped."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from flax import nnx

from datarax.errors import PipelineStateError
from datarax.pipeline import Documents, Mixture, Packed, Pipeline

TAGS = {1: "web", 2: "code", 3: "books"}


def _source(tag: int, count: int, seed: int) -> Documents:
    """Documents of 1-30 tokens, each token tag * 10**6 + the document's index."""
    lengths = np.random.default_rng(seed).integers(1, 31, count)
    return Documents([np.full(n, tag * 10**6 + i) for i, n in enumerate(lengths.tolist())])


SOURCES = {"web": _source(1, 600, 0), "code": _source(2, 60, 1), "books": _source(3, 300, 2)}
OLD = {"web": 0.5, "code": 0.2, "books": 0.3}
NEW = {"web": 0.2, "code": 0.2, "books": 0.6}


def _mixture(weights: dict[str, float]) -> Mixture:
    return Mixture(SOURCES, weights, rngs=nnx.Rngs(3), restart=["code"], epoch_size=4000)


def _pipeline(weights: dict[str, float], **options: object) -> Pipeline:
    """Rows of 32 tokens; the last partial batch kept, so every document planned is read
    (a dropped batch's documents would wait for their source's next pass)."""
    packed = Packed(_mixture(weights), 32, rngs=nnx.Rngs(1))
    return Pipeline(
        source=packed,
        batch_size=8,
        shuffle=True,
        rngs=nnx.Rngs(0),
        drop_remainder=False,
        **options,  # type: ignore[arg-type]
    )


def _documents(batches: list[np.ndarray]) -> dict[str, list[int]]:
    """The documents whose tokens the batches hold, by source (documents fit a row whole,
    so each appears in one row only)."""
    found: dict[str, list[int]] = {name: [] for name in TAGS.values()}
    for tokens in batches:
        for row in tokens:
            for value in np.unique(row[row > 0]).tolist():
                tag, doc = divmod(value, 10**6)
                found[TAGS[tag]].append(doc)
    return found


def _epoch(pipeline: Pipeline) -> list[np.ndarray]:
    return [batch["tokens"] for batch in pipeline]


def test_each_epoch_goes_on_where_the_last_stopped() -> None:
    pipeline = _pipeline(OLD)
    counts, epochs = [], []
    for _ in range(6):
        counts.append(pipeline.num_batches)
        epochs.append(_documents(_epoch(pipeline)))
    webs = [doc for epoch in epochs for doc in epoch["web"]]
    assert len(webs) >= 600 and sorted(webs[:600]) == list(range(600))  # in turn, all once
    for epoch in epochs:
        assert len(set(epoch["web"])) == len(epoch["web"])  # a pass never repeats a document
    assert len(set(counts)) > 1  # epochs of other lengths: the rows of each epoch's documents
    # Code (60 documents, about 930 tokens, at a fifth of 4,000 tokens an epoch) restarts:
    # 5.2 passes over the 6 epochs, each document read 5 or 6 times, in turn.
    times = np.bincount([doc for epoch in epochs for doc in epoch["code"]], minlength=60)
    assert times.min() >= 5 and times.max() <= 6
    state = pipeline.get_state()
    assert state["epoch"] == 6 and state["epoch_basis"]["weights"] == _mixture(OLD).weights
    with_workers = _pipeline(OLD, workers=2)
    for k in range(2):
        assert _documents(_epoch(with_workers)) == epochs[k], k


def test_new_weights_resume_a_saved_state_with_nothing_repeated_or_skipped() -> None:
    reference = _pipeline(OLD)
    first = _epoch(reference)
    interrupted = _pipeline(OLD)
    before = [batch["tokens"] for batch in itertools.islice(iter(interrupted), 5)]
    state = json.loads(json.dumps(interrupted.get_state()))  # through a checkpoint's JSON
    resumed = _pipeline(NEW)
    resumed.set_state(state)
    rest = _epoch(resumed)
    # The epoch under way is read as it was planned, under the weights it began with ...
    assert [b.tolist() for b in before + rest] == [b.tolist() for b in first]
    # ... and the next goes on from where each source stopped, under the new weights.
    after = _epoch(resumed)
    read, later = _documents(first), _documents(after)
    assert not set(read["web"]) & set(later["web"])
    assert not set(read["books"]) & set(later["books"])
    new = _mixture(NEW)
    basis = new.epoch_basis(state["epoch_basis"])
    planned = new.for_epoch(basis).documents_of(range(len(new.for_epoch(basis))))
    for name in ("web", "books"):
        assert sorted(later[name]) == planned[name].tolist(), name
    tokens = {name: 0 for name in TAGS.values()}
    for batch in after:
        for value, count in zip(*np.unique(batch[batch > 0], return_counts=True), strict=True):
            tokens[TAGS[int(value) // 10**6]] += int(count)
    total = sum(tokens.values())
    for name, weight in NEW.items():
        assert abs(tokens[name] / total - weight) < 0.02, tokens
    assert resumed.get_state()["epoch_basis"]["weights"] == new.weights


def test_a_state_over_other_sources_is_refused_by_name() -> None:
    state = _pipeline(OLD).get_state()
    other = Mixture({"web": SOURCES["web"], "news": SOURCES["code"]}, [1, 1], rngs=nnx.Rngs(3))
    pipeline = Pipeline(source=Packed(other, 32, rngs=nnx.Rngs(1)), batch_size=8)
    with pytest.raises(PipelineStateError, match=r"\['books', 'code', 'web'\]") as raised:
        pipeline.set_state({**state, "fingerprint": pipeline.get_state()["fingerprint"]})
    assert raised.value.key == "epoch_basis"
    plain = Pipeline(source={"x": np.arange(400)}, batch_size=8)
    with pytest.raises(PipelineStateError, match="records change by epoch"):
        plain.set_state({**plain.get_state(), "epoch_basis": state["epoch_basis"]})
    assert plain.get_state()["epoch"] == 0  # nothing changed


def test_source_ids_of_a_mixture_name_each_tokens_source() -> None:
    fields = ("tokens", "segment_ids", "source_ids")
    packed = Packed(_mixture(OLD), 32, fields=fields)
    names = _mixture(OLD).names
    for later in (packed, packed.for_epoch(packed.epoch_basis(packed.epoch_basis()))):
        for row in later.__getitems__(range(5)):
            real = row["segment_ids"] > 0
            tags = {TAGS[int(t) // 10**6] for t in row["tokens"][real]}
            assert {names[s] for s in row["source_ids"][real].tolist()} == tags
            assert (row["source_ids"][~real] == -1).all()
