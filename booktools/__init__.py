"""The book's own tools, installed with the kit; a command runs as `python -m booktools.MODULE`.

- pages: the pages in reading order and what each holds (the one reader of _toc.yml and MyST fences)
- labs: each lab's facts, from its notebook's metadata ("dplab")
- notebooks: the one bounded way to run a notebook, and its timeout rule
- conditions: the conditions a pass of the labs runs under, and their registry
- run: the one runner of the labs under conditions (make test-labs ON=...)
- learners: a process that runs labs, asserts only (an asserts-only pass, or the second learner)
- children: processes that never outlive the one that started them
- beside: one command in the background beside another (make test, .ci/run)
- releases: torch releases beside the venv (torch=X.Y.Z), and the record of their passes
- gpu: the GPU pass's settings (gpu)
- nbval_verdicts: a pytest plugin that gives the runner each lab's verdict from an nbval pass
- store: re-execute labs in place and store their outputs (make labs)
- export: what the pages teach, written to labcode/
- readme: README.md's tables, from benchmarks/results/ and the settings
- commands: time the README's commands from a clean clone
- reading: each page's reading time
- numbers: the numbers typed by hand in the book's prose
- bookconfig: the copy of _config.yml that make test builds with
"""
