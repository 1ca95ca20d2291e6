"""The handout that tests/student's modules grade and compare: made once per session."""
from pathlib import Path

import pytest

from tests.support.grading import make_student


@pytest.fixture(scope="session")
def handout(tmp_path_factory) -> Path:
    """make student's folder: labs/ of every lab's student notebook, the book's other pages
    beside it; its labs/ folder. A test writes its notebooks in a folder of its own beside
    labs/ (where the handout's other files are at the same place), never into labs/."""
    return make_student(tmp_path_factory.mktemp("student"))
