"""The code the labs teach, exported from their cells by tools/export_labs.py: do not edit.

- `labcode.allreduce`: from labs/03_allreduce_algorithms.ipynb
- `labcode.costmodel`: from labs/03_allreduce_algorithms.ipynb
- `labcode.overlap`: from labs/04_ddp.ipynb
- `labcode.sharding`: from labs/07_sharding.ipynb
- `labcode.stragglers`: from labs/08_stragglers.ipynb
- `labcode.transformer`: from labs/06_transformer_ddp.ipynb
"""
