"""Instructor mode: the labs as nbgrader assignments. solutions (the regions and checks a lab
marks), student (the learners' notebooks, `make student`), handout (nbgrader's preprocessor
for them), course (an nbgrader course from the labs), grade (`make grade`), grade_class
(`make grade-class`) and sandbox (learners' code as an unprivileged account). Each command runs
as `python -m teach.MODULE`; the lab facts they use come from booktools.labs, and the grader
runs notebooks through booktools.notebooks.execute."""
