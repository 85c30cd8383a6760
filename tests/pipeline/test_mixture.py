"""Mixture: documents of named sources by weight, and changing the weights mid-epoch."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
from flax import nnx

from datarax.pipeline import Documents, Mixture, Packed, Pipeline


def _source(tag: int, count: int, seed: int) -> Documents:
    """Documents whose tokens are (tag, document index) in one number: tag * 10**6 + i."""
    lengths = np.random.default_rng(seed).integers(1, 30, count)
    return Documents([np.full(n, tag * 10**6 + i) for i, n in enumerate(lengths.tolist())])


def _sources() -> dict[str, Documents]:
    return {"web": _source(1, 3000, 0), "code": _source(2, 1500, 1), "books": _source(3, 800, 2)}


def _origin(tokens: np.ndarray) -> tuple[int, int]:
    return divmod(int(tokens[0]), 10**6)


def test_each_source_has_its_weight_in_every_prefix_and_no_document_repeats() -> None:
    weights = {"web": 0.5, "code": 0.3, "books": 0.2}
    mixture = Mixture(_sources(), weights, rngs=nnx.Rngs(0))
    names = np.array([mixture.source_of(i) for i in range(len(mixture))])
    for prefix in (1000, 2000, len(mixture)):
        for name, weight in weights.items():
            assert abs(np.mean(names[:prefix] == name) - weight) < 0.03, (prefix, name)
    origins = [_origin(mixture[i]) for i in range(len(mixture))]
    assert len(set(origins)) == len(origins)
    # The epoch ends when the first source runs out at its weight: books, 800 / 0.2.
    assert abs(len(mixture) - 800 / 0.2) <= 3 and (names == "books").sum() == 800
    assert mixture.lengths.tolist() == [len(mixture[i]) for i in range(len(mixture))]
    picked = [7, 3, 7, 100]
    assert [d.tolist() for d in mixture.read(picked)] == [mixture[i].tolist() for i in picked]


def test_the_order_follows_from_rngs_and_a_source_keeps_its_order_beside_others() -> None:
    sources = _sources()
    one = Mixture(sources, [1, 1, 1], rngs=nnx.Rngs(0))
    again = Mixture(sources, [1, 1, 1], rngs=nnx.Rngs(0))
    other = Mixture(sources, [1, 1, 1], rngs=nnx.Rngs(1))
    first = [mixture[i].tolist() for mixture in (one, again, other) for i in range(20)]
    assert first[:20] == first[20:40] != first[40:]
    two = Mixture({"web": sources["web"], "code": sources["code"]}, [1, 1], rngs=nnx.Rngs(0))

    def webs(mixture: Mixture) -> list[int]:
        """Web's documents in the mixture's order, as many as the shorter mixture holds."""
        names = [mixture.source_of(i) for i in range(len(mixture))]
        return [_origin(mixture[i])[1] for i, name in enumerate(names) if name == "web"][:500]

    assert webs(two) == webs(one)
    copy = pickle.loads(pickle.dumps(one))
    assert [copy[i].tolist() for i in range(20)] == first[:20]


def test_new_weights_mid_epoch_neither_repeat_nor_skip_a_document() -> None:
    """Read part of an epoch of packed rows, then change the weights: every source goes on
    with its own order, without the documents already read."""
    sources, rngs = _sources(), 3
    mixture = Mixture(sources, {"web": 0.6, "code": 0.2, "books": 0.2}, rngs=nnx.Rngs(rngs))
    packed = Packed(mixture, 64)
    pipeline = Pipeline(source=packed, batch_size=16, shuffle=True, rngs=nnx.Rngs(0))
    read = [b["tokens"] for b in itertools.islice(iter(pipeline), 20)]
    state = pipeline.get_state()
    rows = pipeline.epoch_order(state["epoch"])[: state["batch_index"] * 16]
    done = mixture.documents_of(packed.documents_of(rows))
    resumed = Mixture(
        sources, {"web": 0.2, "code": 0.4, "books": 0.4}, rngs=nnx.Rngs(rngs), skip=done
    )
    later = {name: [] for name in sources}
    for i in range(len(resumed)):
        later[resumed.source_of(i)].append(_origin(resumed[i])[1])
    tags = {1: "web", 2: "code", 3: "books"}
    before = {name: set() for name in sources}
    for tokens in read:
        for value in np.unique(tokens[tokens > 0]).tolist():
            tag, doc = divmod(value, 10**6)
            before[tags[tag]].add(doc)
    full = Mixture(sources, [1, 0, 0], rngs=nnx.Rngs(rngs))  # web's whole order, alone
    web_order = [_origin(full[i])[1] for i in range(len(full))]
    for name in sources:
        assert set(done[name].tolist()) == before[name]  # what the rows read, all of it
        assert not set(later[name]) & before[name]  # nothing read twice
    # Web continues its own order: the documents not yet read, in the order they had.
    assert later["web"] == [d for d in web_order if d not in before["web"]][: len(later["web"])]
    names = [resumed.source_of(i) for i in range(len(resumed))]
    assert abs(names[:1000].count("code") / 1000 - 0.4) < 0.03


def test_bad_weights_and_skips_are_named() -> None:
    sources = _sources()
    rngs = nnx.Rngs(0)
    with pytest.raises(ValueError, match=r"\['news'\] are not sources"):
        Mixture(sources, {"web": 1, "code": 1, "books": 1, "news": 1}, rngs=rngs)
    with pytest.raises(ValueError, match=r"\['books'\] have no weight"):
        Mixture(sources, {"web": 1, "code": 1}, rngs=rngs)
    with pytest.raises(
        ValueError, match=r"weights\['code'\] must be a number in \[0, inf\], got -1"
    ):
        Mixture(sources, [1, -1, 1], rngs=rngs)
    with pytest.raises(ValueError, match=r"weights\['web'\] must be finite"):
        Mixture(sources, [float("inf"), 1, 1], rngs=rngs)
    with pytest.raises(ValueError, match="must not all be zero"):
        Mixture(sources, [0, 0, 0], rngs=rngs)
    with pytest.raises(ValueError, match="weights has 2 entries for 3 sources"):
        Mixture(sources, [1, 1], rngs=rngs)
    with pytest.raises(ValueError, match=r"weights\['web'\] must be a number"):
        Mixture(sources, [float("nan"), 1, 1], rngs=rngs)
    with pytest.raises(ValueError, match=r"skip\['code'\] holds document indices outside"):
        Mixture(sources, [1, 1, 1], rngs=rngs, skip={"code": [1500]})
    with pytest.raises(ValueError, match=r"\['books'\] have no documents left"):
        Mixture(sources, [1, 1, 1], rngs=rngs, skip={"books": range(800)})
    with pytest.raises(TypeError, match="sources must be a non-empty dict"):
        Mixture([sources["web"]], [1], rngs=rngs)  # type: ignore[arg-type]
