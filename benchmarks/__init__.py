"""Side-by-side benchmarks of placing batches on devices; run with ``make bench``."""
