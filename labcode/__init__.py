"""The code the labs and chapters teach, exported from their cells by
tools/export_labs.py: do not edit.

- `labcode.allreduce`: from labs/03_allreduce_algorithms.ipynb
- `labcode.batchnorm`: from labs/02_data_parallel_by_hand.ipynb, labs/04_ddp.ipynb
- `labcode.collectives`: from chapters/collectives.md
- `labcode.costmodel`: from labs/03_allreduce_algorithms.ipynb
- `labcode.formulas`: from chapters/data_parallelism.md,
  chapters/allreduce_algorithms.md, chapters/ddp.md, chapters/ddp_inside.md,
  chapters/large_batch.md, chapters/mixed_precision.md, chapters/sharding.md,
  chapters/stragglers.md
- `labcode.overlap`: from labs/04_ddp.ipynb
- `labcode.overlap_timing`: from labs/04_ddp.ipynb
- `labcode.profiling`: from labs/04_ddp.ipynb
- `labcode.sharding`: from labs/07_sharding.ipynb
- `labcode.stragglers`: from labs/08_stragglers.ipynb
- `labcode.training`: from labs/01_single_device.ipynb
- `labcode.transformer`: from labs/06_transformer_ddp.ipynb
"""
