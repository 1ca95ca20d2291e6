"""On the private SLURM cluster (`make test-slurm`): the launching chapter's exercise 1 on a
real SLURM. The batch script runs as task 0 of the batch step, and with the recipe's single
quotes turned into double quotes every task gets the batch shell's RANK and LOCAL_RANK."""
import re
from collections import defaultdict

import pytest

from tests.support.recipes import ROOT
from tests.support.slurm import REASON, REQUIRED, sbatch

pytestmark = pytest.mark.skipif(REASON is not None and not REQUIRED, reason=REASON or "")


def per_task(output: str) -> dict[int, list[str]]:
    """What each task printed, from `srun --label` lines ("3: value")."""
    found = defaultdict(list)
    for task, value in re.findall(r"^\s*(\d+): (\S+)$", output, re.M):
        found[int(task)].append(value)
    return dict(found)


@pytest.mark.parametrize("quote", ["'", '"'])
def test_recipe_quotes_decide_whether_each_task_gets_its_own_rank(quote, tmp_path):
    recipe = (ROOT / "launch/slurm_srun.sbatch").read_text()
    nodes = int(re.search(r"#SBATCH --nodes=(\d+)", recipe).group(1))
    per_node = int(re.search(r"#SBATCH --ntasks-per-node=(\d+)", recipe).group(1))
    (line,) = [x for x in recipe.splitlines() if x.startswith("srun ")]
    probe = 'echo "batch PROCID=$SLURM_PROCID LOCALID=$SLURM_LOCALID"'
    variant = (line.replace("srun ", "srun --label ", 1)
               .replace("python launch/train.py", "printenv RANK LOCAL_RANK")
               .replace("'", quote))
    script = tmp_path / "quotes.sbatch"
    script.write_text(recipe.replace(line, probe + "\n" + variant))
    out = sbatch(str(script), tmp_path, timeout=120)
    assert "batch PROCID=0 LOCALID=0" in out, out
    got = per_task(out)
    world = nodes * per_node
    if quote == "'":
        want = {t: [str(t), str(t % per_node)] for t in range(world)}
    else:  # expanded once, by the batch shell, as task 0
        want = {t: ["0", "0"] for t in range(world)}
    assert got == want, out
