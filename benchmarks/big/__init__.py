"""make bench-big: what the 2-core box cannot show, on a larger machine (bench_big), and its
result files (big_results)."""
