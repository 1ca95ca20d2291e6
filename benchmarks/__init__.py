"""The benchmarks (make bench), each a script whose main is dplab.cluster.jobs.main; installed
with the kit, so that make bench-big, its figures and its tests import them as benchmarks.*."""
