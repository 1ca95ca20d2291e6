"""Published hardware figures the chapters and labs model with, each with its source.

Every figure here is either quoted from a vendor document (named next to it) or marked as
our assumption. Chapters glue these values into their prose; labs use them to label a
modelled curve. None of them is measured on the machine that runs the book.
"""
from __future__ import annotations

# NVIDIA H100 Tensor Core GPU datasheet (SXM): NVLink 4, 900 GB/s per GPU over 18 links,
# counting both directions.
NVLINK_TOTAL_GBS = 900
NVLINK_LINKS = 18
# NVIDIA ConnectX-7 and Quantum-2 product briefs: NDR InfiniBand, 400 Gb/s per port.
NDR_GBITS = 400
# The same H100 datasheet: dense BF16 / FP16 Tensor Core throughput (the sheet's 1,979
# TFLOP/s is with 2:4 sparsity), in FLOP/s.
H100_BF16_DENSE_FLOPS = 989e12
# An HGX/DGX H100 node has 8 GPUs joined by NVLink.
GPUS_PER_NODE = 8
# Seconds per message: our assumption for both fabrics, not a sourced figure.
ALPHA = 5e-6


def nvlink_beta() -> float:
    """Seconds per byte one way over an H100's NVLink (half the datasheet's two-way total)."""
    return 1 / (NVLINK_TOTAL_GBS / 2 * 1e9)


def infiniband_beta() -> float:
    """Seconds per byte one way over one NDR InfiniBand port."""
    return 1 / (NDR_GBITS / 8 * 1e9)


# The fraction of that peak a large Transformer's training step achieves: our assumption
# (large dense models commonly report 30-50 %); a model too small to fill the GPU gets far less.
MFU_ASSUMED = 0.4
