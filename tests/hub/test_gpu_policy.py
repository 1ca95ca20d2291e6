"""The sample hub/jupyterhub_config.py's GPU policy, on fake GPU counts (this box has no GPU)."""
import types

import pytest
from traitlets.config.loader import PyFileConfigLoader

from tests.support.hub import SAMPLE as CONFIG, load_sample

hub = load_sample()


def test_own_gpu_with_one_engine_runs_nccl_on_that_gpu():
    env = hub.learner_environment("own", gpus=8, gpu=5, cores=64)
    assert env == {"CUDA_VISIBLE_DEVICES": "5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "DPLAB_ENGINES": "1",
                   "DPLAB_BACKEND": "nccl", "DPLAB_DEVICE": "cuda", "DPLAB_THREADS": str(64 // 8)}


def test_own_gpu_with_more_engines_shares_it_on_gloo_because_nccl_needs_a_gpu_per_rank():
    env = hub.learner_environment("own", gpus=4, gpu=3, engines=4, cores=32)
    assert (env["CUDA_VISIBLE_DEVICES"], env["DPLAB_ENGINES"], env["DPLAB_BACKEND"]) == ("3", "4", "gloo")
    assert env["DPLAB_THREADS"] == str(32 // (4 * 4))


def test_own_mode_refuses_a_gpu_the_node_does_not_have():
    with pytest.raises(hub.HubPolicyError, match=r"0\.\.3"):
        hub.learner_environment("own", gpus=4, gpu=4)


def test_shared_gpus_give_every_learner_gloo_engines_on_all_gpus():
    env = hub.learner_environment("shared", gpus=2, engines=4, cores=16, learners=4)
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "DPLAB_ENGINES": "4", "DPLAB_BACKEND": "gloo",
                   "DPLAB_DEVICE": "cuda", "DPLAB_THREADS": "1"}
    assert hub.learner_environment("shared", gpus=2)["DPLAB_ENGINES"] == str(hub.DEFAULT_ENGINES)


def test_threads_never_drop_below_one_and_are_left_to_dplab_when_learners_are_unknown():
    assert hub.learner_environment("shared", gpus=8, engines=8, cores=4, learners=8)["DPLAB_THREADS"] == "1"
    assert "DPLAB_THREADS" not in hub.learner_environment("shared", gpus=8, engines=8, cores=4)


@pytest.mark.parametrize("mode", hub.MODES)
def test_a_node_without_gpus_gives_cpu_engines_on_gloo_in_either_mode(mode):
    env = hub.learner_environment(mode, gpus=0, engines=3)
    assert env == {"DPLAB_ENGINES": "3", "DPLAB_BACKEND": "gloo", "DPLAB_DEVICE": "cpu"}


def test_gpu_slots_hand_out_the_lowest_free_gpu_once_and_take_it_back():
    slots = hub.GpuSlots(3)
    assert [slots.take(u) for u in ("ada/", "bob/", "cy/")] == [0, 1, 2]
    assert slots.take("bob/") == 1  # a second spawn of the same server keeps its GPU
    with pytest.raises(hub.HubPolicyError, match="every GPU of this node \\(3\\)"):
        slots.take("dee/")
    slots.release("bob/")
    assert slots.take("dee/") == 1


def fake_spawner(user, name=""):
    log = types.SimpleNamespace(info=lambda *a: None)
    return types.SimpleNamespace(user=types.SimpleNamespace(name=user), name=name, environment={"KEEP": "1"}, log=log)


def test_hooks_set_each_spawners_environment_and_free_its_gpu_when_it_stops():
    pre, post = hub.make_hooks("own", gpus=2, engines=None, learners=None, cores=8)
    a, b, c = fake_spawner("ada"), fake_spawner("bob"), fake_spawner("cy")
    pre(a), pre(b)
    assert (a.environment["CUDA_VISIBLE_DEVICES"], b.environment["CUDA_VISIBLE_DEVICES"]) == ("0", "1")
    assert a.environment["KEEP"] == "1" and a.environment["DPLAB_BACKEND"] == "nccl"
    with pytest.raises(hub.HubPolicyError):
        pre(c)
    post(a)
    pre(c)
    assert c.environment["CUDA_VISIBLE_DEVICES"] == "0"


@pytest.mark.parametrize("env, message", [
    ({"DPHUB_MODE": "exclusive"}, "use 'own'"),
    ({"DPHUB_ENGINES": "0"}, "DPHUB_ENGINES='0'"),
    ({"DPHUB_LEARNERS": "many"}, "DPHUB_LEARNERS='many'"),
])
def test_bad_settings_stop_the_hub_before_it_starts_with_what_to_fix(monkeypatch, env, message):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=message) as raised:  # the file's own HubPolicyError
        PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()
    assert type(raised.value).__name__ == "HubPolicyError"


def test_jupyterhub_loading_the_file_gets_the_hooks_and_jupyterlab(monkeypatch):
    monkeypatch.setenv("DPHUB_ENGINES", "3")
    config = PyFileConfigLoader(CONFIG.name, str(CONFIG.parent)).load_config()
    spawner = fake_spawner("ada")
    config.Spawner.pre_spawn_hook(spawner)
    assert spawner.environment["DPLAB_ENGINES"] == "3"  # this box: no GPU, so CPU engines
    assert config.Spawner.default_url == "/lab"


SMI_L = """GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)
  MIG 3g.20gb     Device  0: (UUID: MIG-a0)
  MIG 3g.20gb     Device  1: (UUID: MIG-a1)
GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-bbbb)
"""


def test_mig_instances_are_slots_of_their_own_named_by_uuid():
    devices = hub.parse_gpu_list(SMI_L)
    assert devices == ["MIG-a0", "MIG-a1", "GPU-bbbb"]
    env = hub.learner_environment("own", gpus=len(devices), gpu=1, devices=devices)
    assert (env["CUDA_VISIBLE_DEVICES"], env["CUDA_DEVICE_ORDER"]) == ("MIG-a1", "PCI_BUS_ID")
    assert hub.parse_gpu_list("GPU 0: Tesla T4\nGPU 1: Tesla T4\n") == ["0", "1"]
