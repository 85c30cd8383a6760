"""The curriculum the course's tests hold the tutorials and the docs to, in one place.

`LESSONS` are the tutorial notebooks in reading order (each one's "What's next" links
the next); `CONCEPTS` are the 21 concepts the lessons teach, by number, named as the
headings of docs/concept_map.md name them. Every concept has a quiz and an exercise in
some notebook, whose cell says which it drills (``<!-- concepts: 5, 7 -->``).
"""

from __future__ import annotations

LESSONS = (
    "01_devices_and_meshes",
    "02_sharding_a_batch",
    "03_uneven_batches",
    "04_many_hosts",
    "05_pipelines",
    "06_data_parallel_training",
    "07_performance",
    "08_meshes_across_hosts",
    "09_preemption_and_resume",
    "10_from_batch_to_step",
    "11_language_model_data",
    "12_collectives",
    "13_overlap_in_a_profile",
    "14_memory_budget",
)

CONCEPTS = {
    1: "devices vs processes, addressable vs global",
    2: "meshes and axis types (Auto, Explicit)",
    3: "PartitionSpec, NamedSharding, replication",
    4: "2D meshes",
    5: "batch arithmetic (global, per host, per device)",
    6: "divisibility, pad and mask",
    7: "per-host slicing (bounds, drop_remainder)",
    8: "the ways to build a global array",
    9: "cross-host checks (shapes, replicas)",
    10: "prefetch and overlap",
    11: "cross-host shuffling",
    12: "uneven epoch ends across hosts",
    13: "resumable, elastic iterators and checkpoints",
    14: "testing many processes on one machine",
    15: "meshes whose axes span hosts",
    16: "where the batch meets the step",
    17: "collectives and their costs",
    18: "overlap seen in a profiler trace",
    19: "slices and DCN",
    20: "a memory budget and choosing DP / FSDP / TP",
    21: "language-model data",
}
