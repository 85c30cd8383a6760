"""A causal language model trained on packed rows of mixed documents, laptop to pod.

Documents of every length, from several sources, are mixed by weight (`Mixture`, the
weights are token shares), packed into rows of `--length` tokens (`Packed`) and fed as
global batches split over the mesh axis `data` (`Pipeline(sharding=...)`). Each packed
row carries its `tokens`, the `segment_ids` and `positions` of the pieces it holds, the
next token of each piece (`targets`), where a target exists (`loss_mask`) and which
source each token came from (`source_ids`). The model is a small transformer whose
attention stays inside each piece; its loss is the cross-entropy on the targets,
averaged over the real target tokens of the global batch, so it is the same number on
one process or many. Every `--print-every` steps process 0 prints the loss over those
steps, overall and for each source; at the end a second pipeline goes over held-out
documents once, its last batch padded and masked (`pad_remainder=True`), for the
evaluation loss. `main` returns every step's losses, the model and the evaluation.

    python examples/train_lm.py --steps 200
    python examples/train_lm.py --axis-types explicit --mesh data=4,model=2
    python examples/train_lm.py --data web=/data/web_store,code=/data/code_store \\
        --eval-data web=/data/web_eval,code=/data/code_eval --weights web=0.7,code=0.3 \\
        --vocab-size 50304 --eos-id 50256

Without `--data` it makes a synthetic corpus: three sources whose documents follow
Markov chains of different predictability over a small vocabulary, so each source's
loss falls to its own floor. `--data NAME=PATH,...` names one source a pair: anything
`datarax.pipeline.documents.Documents` opens (a token store, a Megatron-LM prefix, a
Parquet or JSON Lines file, a glob); `--eval-data` the held-out documents, under the
same names.

On a cluster, start it once per host (see docs/laptop_to_pod.md); on one machine,
`datarax.distributed.launch_local("examples/train_lm.py", args=[...])`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import Pipeline
from datarax.pipeline.documents import Documents, Mixture, Packed

DATA_AXIS = "data"
FIELDS = ("tokens", "segment_ids", "positions", "targets", "loss_mask", "source_ids")
BOS_ID, EOS_ID, FIRST_WORD = 1, 2, 3  # synthetic ids; 0 is what Packed pads with
# Each synthetic source: (share of the words it uses, Dirichlet concentration of its
# transitions: smaller is more predictable, shortest and longest document).
SYNTHETIC = {"web": (1.0, 0.1, 8, 160), "code": (1.0, 0.01, 32, 320), "math": (0.25, 0.3, 4, 48)}
SYNTHETIC_WEIGHTS = {"web": 0.5, "code": 0.3, "math": 0.2}


def join_cluster() -> None:
    """Joins the cluster this process was started in; alone, runs as one process."""
    if jax.distributed.is_initialized():  # launch_local has joined it already
        return
    try:
        jax.distributed.initialize()  # finds its peers on Cloud TPU, SLURM, Kubernetes
    except (ValueError, RuntimeError, OSError) as error:  # OSError: no metadata server
        print(f"No cluster found ({error}); running as a single process.")


def markov_documents(
    rng: np.random.Generator, transitions: np.ndarray, lengths: np.ndarray
) -> list[np.ndarray]:
    """One document a length, each a walk of the chain `transitions` from a random word."""
    cumulative = np.cumsum(transitions, axis=1)
    walks = np.empty((len(lengths), int(lengths.max(initial=1))), np.int32)
    walks[:, 0] = rng.integers(0, len(transitions), len(lengths))
    for t in range(1, walks.shape[1]):  # every document one step at a time, together
        draws = rng.random(len(lengths))[:, None]
        walks[:, t] = (draws > cumulative[walks[:, t - 1]]).sum(axis=1)
    walks = np.minimum(walks, len(transitions) - 1)  # a draw above a sum rounded below 1
    return [walk[:length] + FIRST_WORD for walk, length in zip(walks, lengths, strict=True)]


def synthetic_corpus(
    documents: int, vocab_size: int, seed: int = 0
) -> tuple[dict[str, list[np.ndarray]], dict[str, list[np.ndarray]]]:
    """Training and held-out documents of the three `SYNTHETIC` sources: `documents` in
    all for training, a tenth as many held out, token ids in [3, vocab_size)."""
    words = vocab_size - FIRST_WORD
    if words < 8 or documents < len(SYNTHETIC):
        raise ValueError(
            f"The synthetic corpus needs --vocab-size 11 or more and --documents "
            f"{len(SYNTHETIC)} or more (one a source), got {vocab_size} and {documents}."
        )
    train, held_out = {}, {}
    for number, (name, (share, concentration, shortest, longest)) in enumerate(SYNTHETIC.items()):
        rng = np.random.default_rng([seed, number])
        used = max(2, round(share * words))
        transitions = rng.dirichlet(np.full(used, concentration), size=used)
        count = max(1, documents // len(SYNTHETIC))
        lengths = rng.integers(shortest, longest + 1, count + max(1, count // 10))
        made = markov_documents(rng, transitions, lengths)
        train[name], held_out[name] = made[:count], made[count:]
    return train, held_out


def parse_pairs(text: str, option: str) -> dict[str, str]:
    """'web=a,code=b' as {'web': 'a', 'code': 'b'}, in the order written."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        name, equals, value = (piece.strip() for piece in part.partition("="))
        if not equals or not name or not value:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} is not NAME=VALUE; write e.g. {option} web=...,code=..."
            )
        if name in pairs:
            raise argparse.ArgumentTypeError(f"{name!r} is named twice in {option} {text!r}.")
        pairs[name] = value
    return pairs


def parse_weights(text: str) -> dict[str, float]:
    """'web=0.7,code=0.3' as {'web': 0.7, 'code': 0.3}."""
    weights = {}
    for name, value in parse_pairs(text, "--weights").items():
        try:
            weights[name] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"the weight of {name!r} must be a number, got {value!r}."
            ) from None
    return weights


def parse_mesh(text: str) -> dict[str, int]:
    """'data=4,model=2' as {'data': 4, 'model': 2}; one size may be -1 (the rest)."""
    axes: dict[str, int] = {}
    for name, size in parse_pairs(text, "--mesh").items():
        if not name.isidentifier() or not size.lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(
                f"{name}={size} is not AXIS=SIZE (a name and a whole number or -1); write "
                "e.g. --mesh data=4,model=2."
            )
        axes[name] = int(size)
        if axes[name] == 0 or axes[name] < -1:
            raise argparse.ArgumentTypeError(f"the size of {name!r} must be 1 or more, or -1.")
    if list(axes.values()).count(-1) > 1:
        raise argparse.ArgumentTypeError(f"only one axis may have size -1 in {text!r}.")
    if DATA_AXIS not in axes:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no {DATA_AXIS!r} axis, which the batch is split over; add one."
        )
    return axes


def build_mesh(axes: Mapping[str, int], axis_types: str) -> Mesh:
    """The mesh `axes` describes over every device, in process order, the first axis
    outermost, with all axes Auto or all Explicit."""
    found = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    known = math.prod(size for size in axes.values() if size != -1)
    sizes = {name: (len(found) // known if size == -1 else size) for name, size in axes.items()}
    if math.prod(sizes.values()) != len(found):
        raise ValueError(
            f"--mesh {','.join(f'{n}={s}' for n, s in axes.items())} does not fit the "
            f"{len(found)} devices of this job: the sizes must multiply to {len(found)}."
        )
    # Spelled out: jax.make_mesh gives Auto axes on jax 0.7 but Explicit ones on 0.10.
    kind = {"auto": AxisType.Auto, "explicit": AxisType.Explicit}[axis_types]
    grid = np.array(found, dtype=object).reshape(tuple(sizes.values()))
    return Mesh(grid, tuple(sizes), axis_types=(kind,) * len(sizes))


class Lookup(nnx.Module):
    """An embedding table read at integer ids: rows of `num` vectors of `dim` numbers."""

    def __init__(self, num: int, dim: int, rows: NamedSharding | None, *, rngs: nnx.Rngs):
        self.table = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), (num, dim)))
        self.rows = rows

    def __call__(self, ids: jax.Array) -> jax.Array:
        if self.rows is None:  # Auto axes: the compiler chooses the output's sharding
            return self.table[...][ids]
        # Explicit axes: a gather of a replicated table at ids split over `data` has no
        # sharding jax can infer on jax 0.10 (it raises ShardingTypeError), so it is
        # spelled out: the output is split like the ids. (`.at[].get(out_sharding=)`
        # refuses Auto axes, hence the two branches; jnp.take takes no out_sharding.)
        return self.table[...].at[ids].get(out_sharding=self.rows)


class Block(nnx.Module):
    """Pre-norm self-attention and an MLP, each added to its input."""

    def __init__(self, dim: int, heads: int, *, rngs: nnx.Rngs):
        self.heads = heads
        self.attention_norm = nnx.LayerNorm(dim, rngs=rngs)
        self.qkv = nnx.Linear(dim, 3 * dim, rngs=rngs)
        self.out = nnx.Linear(dim, dim, rngs=rngs)
        self.mlp_norm = nnx.LayerNorm(dim, rngs=rngs)
        self.up = nnx.Linear(dim, 4 * dim, rngs=rngs)
        self.down = nnx.Linear(4 * dim, dim, rngs=rngs)

    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        rows, length, dim = x.shape
        qkv = self.qkv(self.attention_norm(x)).reshape(rows, length, 3, self.heads, -1)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        attended = jax.nn.dot_product_attention(q, k, v, mask=mask)
        x = x + self.out(attended.reshape(rows, length, dim))
        return x + self.down(jax.nn.gelu(self.up(self.mlp_norm(x))))


def attention_mask(segment_ids: jax.Array) -> jax.Array:
    """(rows, 1, length, length): token i attends to j <= i of the same piece, never to
    padding (segment id 0); the 1 broadcasts over heads."""
    same_piece = segment_ids[:, :, None] == segment_ids[:, None, :]
    real = (segment_ids > 0)[:, :, None]
    causal = jnp.tril(jnp.ones((segment_ids.shape[1],) * 2, dtype=bool))
    return (same_piece & real & causal)[:, None]


class CausalLM(nnx.Module):
    """Token and learned position embeddings, `layers` blocks, and a projection to logits."""

    def __init__(
        self,
        vocab_size: int,
        length: int,
        dim: int,
        heads: int,
        layers: int,
        rows: NamedSharding | None,
        *,
        rngs: nnx.Rngs,
    ):
        if dim % heads:
            raise ValueError(f"--dim {dim} must be a multiple of --heads {heads}.")
        self.tokens = Lookup(vocab_size, dim, rows, rngs=rngs)
        self.positions = Lookup(length, dim, rows, rngs=rngs)
        # nnx.data: a list of modules is the model's data (flax 0.12 asks for it to be said).
        self.blocks = nnx.data([Block(dim, heads, rngs=rngs) for _ in range(layers)])
        self.norm = nnx.LayerNorm(dim, rngs=rngs)
        self.logits = nnx.Linear(dim, vocab_size, rngs=rngs)

    def __call__(self, batch: Mapping[str, jax.Array]) -> jax.Array:
        x = self.tokens(batch["tokens"]) + self.positions(batch["positions"])
        mask = attention_mask(batch["segment_ids"])
        for block in self.blocks:
            x = block(x, mask)
        return self.logits(self.norm(x)).astype(jnp.float32)


def losses(
    logits: jax.Array, batch: Mapping[str, jax.Array], num_sources: int
) -> tuple[jax.Array, jax.Array]:
    """The mean cross-entropy over the global batch's real target tokens, and each
    source's (summed loss, target tokens) as a (2, num_sources) array."""
    weight = batch["loss_mask"].astype(jnp.float32)
    if "row_mask" in batch:  # an evaluation batch: its filling rows count for nothing
        weight = weight * batch["row_mask"][:, None]
    per_token = optax.softmax_cross_entropy_with_integer_labels(logits, batch["targets"]) * weight
    mean = per_token.sum() / jnp.maximum(weight.sum(), 1.0)  # sums over every host's rows
    source = jax.nn.one_hot(batch["source_ids"], num_sources)  # padding (-1): all zeros
    # Sums, not einsums: on Explicit axes a contraction over the sharded rows would need
    # its output sharding spelled out, a sum reduces over them on its own.
    by_source = jnp.stack([per_token[..., None] * source, weight[..., None] * source])
    return mean, by_source.sum(axis=(1, 2))


def make_steps(
    graphdef: Any, optimizer: optax.GradientTransformation, num_sources: int
) -> tuple[Any, Any]:
    """The jitted steps: training, (params, optimizer state, batch) -> (params, optimizer
    state, loss, totals by source); evaluation, (params, batch) -> (totals by source, the
    batch's real rows)."""

    def objective(params: Any, batch: Mapping[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return losses(nnx.merge(graphdef, params)(batch), batch, num_sources)

    @jax.jit
    def train_step(params: Any, opt_state: Any, batch: Mapping[str, jax.Array]) -> Any:
        (loss, totals), grads = jax.value_and_grad(objective, has_aux=True)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, totals

    @jax.jit
    def eval_step(params: Any, batch: Mapping[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        return objective(params, batch)[1], batch["row_mask"].sum()

    return train_step, eval_step


@dataclasses.dataclass(frozen=True)
class Corpus:
    """What the rows are packed from: the sources by name (documents or lists of token
    arrays), the held-out ones (None: no evaluation), the weights and the added ids."""

    train: Mapping[str, Any]
    held_out: Mapping[str, Any] | None
    weights: Mapping[str, float]
    vocab_size: int
    bos_id: int | None
    eos_id: int | None

    def packed(self, held_out: bool, length: int, seed: int) -> Packed:
        """The training (or held-out) sources mixed by `weights`, packed into rows."""
        sources = self.held_out if held_out else self.train
        assert sources is not None
        docs = {name: Documents(d) if isinstance(d, list) else d for name, d in sources.items()}
        mixture = Mixture(docs, self.weights, rngs=nnx.Rngs(seed))
        return Packed(
            mixture,
            length,
            rngs=nnx.Rngs(seed + 1),
            bos_id=self.bos_id,
            eos_id=self.eos_id,
            fields=FIELDS,
        )


def open_corpus(
    data: Mapping[str, str] | None,
    eval_data: Mapping[str, str] | None,
    weights: Mapping[str, float] | None,
    *,
    documents: int,
    vocab_size: int | None,
    bos_id: int | None,
    eos_id: int | None,
    seed: int,
) -> Corpus:
    """The synthetic corpus (without `data`: its ids 1 and 2 added unless others are
    given), or a `Documents` for each named path (ids added only where given)."""
    if data is None:
        vocab_size = 64 if vocab_size is None else vocab_size
        train, held_out = synthetic_corpus(documents, vocab_size, seed)
        return Corpus(
            train,
            held_out,
            SYNTHETIC_WEIGHTS if weights is None else weights,
            vocab_size,
            BOS_ID if bos_id is None else bos_id,
            EOS_ID if eos_id is None else eos_id,
        )
    if vocab_size is None:
        raise ValueError(
            "--data needs --vocab-size: more than the largest token id of the data (the "
            "tokenizer's vocabulary size)."
        )
    if eval_data is not None and set(eval_data) != set(data):
        raise ValueError(
            f"--eval-data names the sources {sorted(eval_data)}, --data {sorted(data)}: "
            "give held-out documents for the same sources."
        )
    opened = {name: Documents(path) for name, path in data.items()}
    held = None if eval_data is None else {n: Documents(p) for n, p in eval_data.items()}
    weights = {name: 1.0 for name in data} if weights is None else weights
    return Corpus(opened, held, weights, vocab_size, bos_id, eos_id)


def by_name(totals: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """Each source's mean loss from its (summed loss, tokens) column; NaN without tokens."""
    return {
        name: float(total / count) if count else math.nan
        for name, total, count in zip(names, *totals, strict=True)
    }


def report(text: str | None, record: dict[str, Any], log: str | None) -> None:
    """Prints `text` (if any) and appends `record` to `log` (JSON lines), on process 0."""
    if jax.process_index() != 0:
        return
    if text is not None:
        print(text)
    if log:
        with open(log, "a") as file:
            file.write(json.dumps(record) + "\n")


def _shown(totals: np.ndarray, names: Sequence[str]) -> str:
    mean = totals[0].sum() / max(totals[1].sum(), 1.0)
    each = "  ".join(f"{name} {value:.3f}" for name, value in by_name(totals, names).items())
    return f"loss {mean:.4f}  by source: {each}"


def initial_state(
    vocab_size: int,
    length: int,
    shape: tuple[int, int, int],
    rows: NamedSharding,
    explicit: bool,
    optimizer: optax.GradientTransformation,
    seed: int,
) -> tuple[Any, Any, Any]:
    """The model's structure, its parameters and the optimizer's state, both replicated
    over the mesh: the same on every host, as every host builds them from `seed`."""
    dim, heads, layers = shape
    lookups = rows if explicit else None
    model = CausalLM(vocab_size, length, dim, heads, layers, lookups, rngs=nnx.Rngs(seed))
    graphdef, host_params = nnx.split(model)
    replicated = NamedSharding(rows.mesh, P())
    params = jax.device_put(jax.tree.map(np.asarray, host_params), replicated)
    return graphdef, params, jax.jit(optimizer.init, out_shardings=replicated)(params)


def train(
    corpus: Corpus,
    steps: int = 200,
    *,
    batch_size: int = 32,
    length: int = 128,
    mesh: Mapping[str, int] | None = None,
    axis_types: str = "auto",
    shape: tuple[int, int, int] = (64, 4, 2),
    learning_rate: float = 3e-3,
    print_every: int = 20,
    log: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Trains a model of `shape` (width, heads, layers) for `steps` steps, then evaluates
    it on the held-out rows; returns the source names, every step's losses, the trained
    model and the evaluation's loss, by source too, and rows."""
    grid = build_mesh(mesh or {DATA_AXIS: -1}, axis_types)
    rows = NamedSharding(grid, P(DATA_AXIS))  # split over data, repeated over the rest
    packed = corpus.packed(False, length, seed)
    names = list(packed.documents.names)
    pipeline = Pipeline(
        source=packed, batch_size=batch_size, shuffle=True, rngs=nnx.Rngs(seed), sharding=rows
    )
    optimizer = optax.adamw(learning_rate)
    explicit = axis_types == "explicit"
    graphdef, params, opt_state = initial_state(
        corpus.vocab_size, length, shape, rows, explicit, optimizer, seed
    )
    train_step, eval_step = make_steps(graphdef, optimizer, len(names))
    count, devices = jax.process_count(), jax.device_count()
    report(
        f"{count} process{'es' * (count > 1)}, {devices} device{'s' * (devices > 1)}, mesh "
        f"{dict(grid.shape)} ({axis_types} axes); {len(packed)} rows of {length} tokens, "
        f"{packed.fill:.1%} full; sources {', '.join(names)}",
        {"rows": len(packed), "names": names},
        log,
    )
    history: list[dict[str, Any]] = []
    window = np.zeros((2, len(names)))  # since the last line printed
    iterator = iter(pipeline)
    while len(history) < steps:
        try:
            batch = next(iterator)
        except StopIteration:  # the epoch is over: the next iter() starts the next one
            iterator = iter(pipeline)
            continue
        params, opt_state, loss, totals = train_step(params, opt_state, batch)
        totals = np.asarray(totals)  # replicated: every host holds all of it
        window += totals
        step = len(history) + 1
        history.append({"step": step, "loss": float(loss), "sources": by_name(totals, names)})
        shown = step % print_every == 0 or step == steps
        report(f"step {step:5d}  {_shown(window, names)}" if shown else None, history[-1], log)
        window *= not shown
    model = nnx.merge(graphdef, params)
    result: dict[str, Any] = {"names": names, "history": history, "model": model}
    result["losses"] = [line["loss"] for line in history]
    if corpus.held_out is not None:
        held_out = corpus.packed(True, length, seed)
        totals, real_rows = evaluate(eval_step, params, held_out, batch_size, rows)
        result["eval_rows"] = real_rows
        result["eval_loss"] = float(totals[0].sum() / max(totals[1].sum(), 1.0))
        result["eval_sources"] = by_name(totals, names)
        report(
            f"eval: {real_rows} held-out rows, {_shown(totals, names)}",
            {key: result[key] for key in ("eval_rows", "eval_loss", "eval_sources")},
            log,
        )
    return result


def evaluate(
    eval_step: Any, params: Any, packed: Packed, batch_size: int, rows: NamedSharding
) -> tuple[np.ndarray, int]:
    """Each source's (summed loss, target tokens) over every row of `packed` once, and
    the number of rows: the last batch is filled up to `batch_size` with repeated rows,
    which its `row_mask` leaves out of the sums."""
    pipeline = Pipeline(
        source=packed,
        batch_size=batch_size,
        drop_remainder=False,
        pad_remainder=True,
        sharding=rows,
    )
    totals, real_rows = np.zeros((2, len(packed.documents.names))), 0
    for batch in pipeline:
        batch_totals, batch_rows = eval_step(params, batch)
        totals += np.asarray(batch_totals)
        real_rows += int(batch_rows)
    return totals, real_rows


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32, help="global rows a step")
    parser.add_argument("--length", type=int, default=128, help="tokens a packed row")
    parser.add_argument(
        "--data",
        type=lambda text: parse_pairs(text, "--data"),
        default=None,
        help="NAME=PATH,...: a documents source a name (default: a synthetic corpus)",
    )
    parser.add_argument(
        "--eval-data",
        type=lambda text: parse_pairs(text, "--eval-data"),
        default=None,
        help="NAME=PATH,...: held-out documents of the same sources",
    )
    parser.add_argument(
        "--weights", type=parse_weights, default=None, help="token shares, e.g. web=0.7,code=0.3"
    )
    parser.add_argument("--documents", type=int, default=3000, help="synthetic documents")
    parser.add_argument("--vocab-size", type=int, default=None, help="64 for synthetic data")
    parser.add_argument("--bos-id", type=int, default=None, help="added before each document")
    parser.add_argument("--eos-id", type=int, default=None, help="added after each document")
    parser.add_argument(
        "--mesh", type=parse_mesh, default=None, help="e.g. data=4,model=2 (default data=-1)"
    )
    parser.add_argument("--axis-types", choices=("auto", "explicit"), default="auto")
    parser.add_argument("--dim", type=int, default=64, help="the model's width")
    parser.add_argument("--heads", type=int, default=4, help="attention heads")
    parser.add_argument("--layers", type=int, default=2, help="transformer blocks")
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--print-every", type=int, default=20)
    parser.add_argument("--log", default=None, help="append each step's losses (JSON lines)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    join_cluster()
    corpus = open_corpus(
        args.data,
        args.eval_data,
        args.weights,
        documents=args.documents,
        vocab_size=args.vocab_size,
        bos_id=args.bos_id,
        eos_id=args.eos_id,
        seed=args.seed,
    )
    return train(
        corpus,
        args.steps,
        batch_size=args.batch_size,
        length=args.length,
        mesh=args.mesh,
        axis_types=args.axis_types,
        shape=(args.dim, args.heads, args.layers),
        learning_rate=args.learning_rate,
        print_every=args.print_every,
        log=args.log,
        seed=args.seed,
    )


if __name__ == "__main__":
    main()
