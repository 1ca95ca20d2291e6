"""The book's own tools: its pages as a model (pages), each lab's facts (labs), running a
notebook bounded in time (notebooks), the labs under conditions (conditions, run), torch
releases beside the venv (releases), exporting what the labs teach to labcode/ (export), and
the README's tables (readme). Installed with the kit; run as `python -m booktools.MODULE`."""
