"""Mixture: documents of named sources by weight in tokens or documents, sources that
restart, epochs that continue where the last stopped, and new weights from a basis."""

from __future__ import annotations

import itertools
import json
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
    mixture = Mixture(_sources(), weights, rngs=nnx.Rngs(0), shares="documents")
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
    weights = {"web": 0.6, "code": 0.2, "books": 0.2}
    mixture = Mixture(sources, weights, rngs=nnx.Rngs(rngs), shares="documents")
    packed = Packed(mixture, 64)
    pipeline = Pipeline(source=packed, batch_size=16, shuffle=True, rngs=nnx.Rngs(0))
    read = [b["tokens"] for b in itertools.islice(iter(pipeline), 20)]
    state = pipeline.get_state()
    rows = pipeline.epoch_order(state["epoch"])[: state["batch_index"] * 16]
    done = mixture.documents_of(packed.documents_of(rows))
    resumed = Mixture(
        sources,
        {"web": 0.2, "code": 0.4, "books": 0.4},
        rngs=nnx.Rngs(rngs),
        shares="documents",
        skip=done,
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
    full = Mixture(sources, [1, 0, 0], rngs=nnx.Rngs(rngs))  # web's first pass, alone
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


def _tokens_by_source(mixture: Mixture) -> dict[str, int]:
    tokens = dict.fromkeys(mixture.names, 0)
    for i, length in enumerate(mixture.lengths.tolist()):
        tokens[mixture.source_of(i)] += length
    return tokens


def test_weights_are_shares_of_tokens_within_a_point() -> None:
    """Sources of very different document lengths: the weights hold for tokens."""
    rng = np.random.default_rng(5)
    long = Documents([np.full(n, 1) for n in rng.integers(100, 400, 2000).tolist()])
    short = Documents([np.full(n, 2) for n in rng.integers(1, 20, 6000).tolist()])
    weights = {"long": 0.7, "short": 0.3}
    mixture = Mixture({"long": long, "short": short}, weights, rngs=nnx.Rngs(0), restart=True)
    tokens = _tokens_by_source(mixture)
    total = sum(tokens.values())
    assert len(mixture) > 3000
    for name, weight in weights.items():
        assert abs(tokens[name] / total - weight) < 0.01, (name, tokens)
    by_documents = Mixture(
        {"long": long, "short": short}, weights, rngs=nnx.Rngs(0), shares="documents"
    )
    names = [by_documents.source_of(i) for i in range(len(by_documents))]
    assert abs(names.count("long") / len(names) - 0.7) < 0.01  # the other unit, held too
    # Every prefix: within one document's tokens of its share.
    cumulative = {name: 0 for name in weights}
    for i, length in enumerate(mixture.lengths[:2000].tolist()):
        cumulative[mixture.source_of(i)] += length
        done = sum(cumulative.values())
        assert abs(cumulative["long"] - 0.7 * done) <= 400 + 1, i


def _reads(mixture: Mixture, epochs: int) -> list[dict[str, list[int]]]:
    """Each epoch's documents of each source, in the order read, epoch after epoch."""
    basis, out = mixture.epoch_basis(), []
    for _ in range(epochs):
        epoch = mixture.for_epoch(basis)
        read = {name: [] for name in mixture.names}
        for i in range(len(epoch)):
            read[epoch.source_of(i)].append(int(epoch._doc[i]))
        out.append(read)
        basis = mixture.epoch_basis(basis)
    return out


def test_a_small_source_that_restarts_is_upsampled_and_the_large_one_read_in_turn() -> None:
    rng = np.random.default_rng(6)
    large = Documents([np.full(n, 1) for n in rng.integers(5, 50, 2000).tolist()])
    small = Documents([np.full(n, 2) for n in rng.integers(5, 50, 200).tolist()])
    sources = {"large": large, "small": small}
    mixture = Mixture(sources, [0.5, 0.5], rngs=nnx.Rngs(1), restart=["small"])
    first, second = _reads(mixture, 2)
    # An epoch is both sources' tokens: the small source, a tenth of them at half the
    # share, is read about 5.5 times; each of its documents 5 or 6 times (passes in turn).
    times = np.bincount(first["small"], minlength=200)
    assert times.min() >= 5 and times.max() <= 6 and abs(times.mean() - 5.5) < 0.3
    # The large source is read in turn: about 0.55 of it, then the rest, then it ends the
    # second epoch (it does not restart): every document exactly once over the two.
    assert abs(len(first["large"]) / 2000 - 0.55) < 0.05
    assert sorted(first["large"] + second["large"]) == list(range(2000))
    third = _reads(mixture, 3)[2]
    assert len(set(third["large"])) == len(third["large"])  # a new pass, in a new order
    assert third["large"] != (first["large"] + second["large"])[: len(third["large"])]


def test_epochs_continue_each_source_so_none_is_starved() -> None:
    """Without restart, the first source to run out ends each epoch; the others go on
    where they stopped, so over the epochs every document of every source is read."""
    mixture = Mixture(_sources(), {"web": 0.2, "code": 0.2, "books": 0.6}, rngs=nnx.Rngs(2))
    reads = _reads(mixture, 6)
    for name, count in (("web", 3000), ("code", 1500), ("books", 800)):
        stream = [doc for epoch in reads for doc in epoch[name]]
        first_pass = stream[:count]
        assert sorted(first_pass) == list(range(count)) or len(stream) < count, name
        assert len(stream) >= min(count, 1200), name
    copy = pickle.loads(pickle.dumps(mixture))
    assert _reads(copy, 3) == reads[:3]


def test_new_weights_take_effect_from_the_next_epoch_of_a_basis() -> None:
    """A basis saved under old weights makes that epoch as it was; the next epoch goes
    on from where each source stopped, under the new weights."""
    sources = _sources()
    old = Mixture(sources, {"web": 0.5, "code": 0.3, "books": 0.2}, rngs=nnx.Rngs(3))
    new = Mixture(sources, {"web": 0.1, "code": 0.1, "books": 0.8}, rngs=nnx.Rngs(3))
    saved = json.loads(json.dumps(old.epoch_basis(old.epoch_basis())))  # epoch 1, as JSON
    again = new.for_epoch(saved)
    was = old.for_epoch(saved)
    assert [again[i].tolist() for i in range(len(again))] == [
        was[i].tolist() for i in range(len(was))
    ]
    after = new.for_epoch(new.epoch_basis(saved))
    tokens = _tokens_by_source(after)
    assert abs(tokens["books"] / sum(tokens.values()) - 0.8) < 0.02
    assert after.epoch_basis()["weights"] == new.weights
    # Books continue their stream: what epoch 2 reads follows what epochs 0 and 1 read.
    read = _reads(old, 2)
    before = [d for epoch in read for d in epoch["books"]]
    later = [int(after._doc[i]) for i in range(len(after)) if after.source_of(i) == "books"]
    stream = _reads(Mixture(sources, [0, 0, 1], rngs=nnx.Rngs(3), restart=True), 4)
    books = [d for epoch in stream for d in epoch["books"]]
    assert books[: len(before) + len(later)] == before + later


def test_bad_restart_epoch_size_shares_and_bases_are_named() -> None:
    sources, rngs = _sources(), nnx.Rngs(0)
    with pytest.raises(ValueError, match=r"restart names \['news'\], which are not sources"):
        Mixture(sources, [1, 1, 1], rngs=rngs, restart=["news"])
    with pytest.raises(TypeError, match="restart must be True, False or a list"):
        Mixture(sources, [1, 1, 1], rngs=rngs, restart="web")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epoch_size must be"):
        Mixture(sources, [1, 1, 1], rngs=rngs, epoch_size=0)
    with pytest.raises(ValueError, match=r"shares must be .tokens. or .documents., got .bytes."):
        Mixture(sources, [1, 1, 1], rngs=rngs, shares="bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"have no documents left"):
        Mixture({"a": Documents([]), "b": sources["web"]}, [1, 1], rngs=rngs, restart=True)
    with pytest.raises(ValueError, match="holds no document: epoch_size=1"):
        Mixture({"a": Documents([np.arange(50)])}, [1], rngs=rngs, epoch_size=1)
    mixture = Mixture(sources, [1, 1, 1], rngs=rngs)
    other = Mixture({"web": sources["web"], "news": sources["code"]}, [1, 1], rngs=rngs)
    with pytest.raises(ValueError, match=r"names the sources \['news', 'web'\] in 'weights'"):
        mixture.for_epoch(other.epoch_basis())
    basis = mixture.epoch_basis()
    basis["starts"]["web"] = -1
    with pytest.raises(ValueError, match=r"starts\['web'\] must be"):
        mixture.for_epoch(basis)
    with pytest.raises(ValueError, match="with 'weights' and 'starts'"):
        mixture.for_epoch({"weights": {}})
