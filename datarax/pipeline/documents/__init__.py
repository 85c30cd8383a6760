"""Language-model data: token documents, mixtures of them, and packed rows.

`Documents` reads token documents of every length from token stores, Megatron-LM indexed
datasets, flat token files, Parquet, JSON Lines (compressed too), a Hugging Face dataset
or a sequence, or tokenizes text from them on the way;
`write_documents` writes any of them as a token store, on every core and every host at
once; `Mixture` draws documents from several sources by their shares of tokens, epoch
after epoch; `Packed` packs documents into fixed-length rows planned from their lengths
alone, with the fields a training step needs. One module a job:

- `_contract`: what a documents source is (``lengths``, ``len``, ``[i]``, ``read``), the
  one rule for indices and the one rule for lengths;
- `_values`: what a document is (1-D integers), checked where a record enters;
- `_documents`: `Documents`, over `_files` (paths resolved, kinds told apart, documents
  numbered across files), one module a file kind (`_store`, `_megatron`, `_flat`,
  `_parquet`, `_jsonl`, `_compressed`; `_arrow` for Parquet's columns and datasets),
  `_index` (indexes computed once and cached), and `_text` (text tokenized on the way);
- `_write`: `write_documents`;
- `_mixture`: `Mixture`, each epoch's schedule in `_schedule` (every source a stream of
  passes, interleaved by token shares); `_packed`: `Packed`, its plans in `_plan` (in
  memory) and `_saved_plans` (in files, memory-mapped).
"""

from datarax.pipeline.documents._documents import Documents as Documents
from datarax.pipeline.documents._mixture import Mixture as Mixture
from datarax.pipeline.documents._packed import Packed as Packed
from datarax.pipeline.documents._write import write_documents as write_documents

__all__ = ["Documents", "Mixture", "Packed", "write_documents"]
