"""Backend and device choice, with the GPU count given rather than detected."""
import socket

import pytest

from dplab.cluster.errors import BackendError, PortInUseError
from dplab.cluster.network import check_port_free, free_port
from dplab.cluster.settings import BackendChoice, choose_backend


@pytest.mark.parametrize(
    "n_ranks, n_gpus, expected",
    [
        (4, 0, BackendChoice("gloo", "cpu")),
        (4, 4, BackendChoice("nccl", "cuda")),
        (8, 8, BackendChoice("nccl", "cuda")),
        (2, 8, BackendChoice("nccl", "cuda")),
        (4, 1, BackendChoice("gloo", "cuda")),  # ranks share one GPU: gloo with CUDA tensors
        (4, 3, BackendChoice("gloo", "cuda")),
    ],
)
def test_auto_choice_uses_nccl_only_when_every_rank_owns_a_gpu(n_ranks, n_gpus, expected):
    assert choose_backend(n_ranks, n_gpus) == expected


def test_device_cpu_forces_gloo_even_with_gpus():
    assert choose_backend(4, 8, device="cpu") == BackendChoice("gloo", "cpu")


def test_explicit_gloo_on_gpus_keeps_cuda_tensors():
    assert choose_backend(2, 2, backend="gloo") == BackendChoice("gloo", "cuda")


def test_nccl_without_enough_gpus_says_what_to_do():
    with pytest.raises(BackendError, match="NCCL needs one GPU per rank.*4 ranks see 2"):
        choose_backend(4, 2, backend="nccl")
    with pytest.raises(BackendError, match="NCCL works on GPUs only, and no GPU is visible: use backend='gloo'"):
        choose_backend(1, 0, backend="nccl")


def test_nccl_on_cpu_device_is_refused():
    with pytest.raises(BackendError, match="GPU tensors only"):
        choose_backend(2, 2, backend="nccl", device="cpu")


def test_unknown_backend_and_device_are_refused():
    with pytest.raises(BackendError, match="unknown backend 'ucc'"):
        choose_backend(2, 0, backend="ucc")
    with pytest.raises(BackendError, match="unknown device 'tpu'"):
        choose_backend(2, 0, device="tpu")


def test_cuda_device_without_gpu_is_refused():
    with pytest.raises(BackendError, match="no GPU is visible"):
        choose_backend(2, 0, device="cuda")


def test_mpi_backend_refused_when_torch_lacks_it():
    import torch.distributed as dist

    if dist.is_mpi_available():
        assert choose_backend(2, 0, backend="mpi").backend == "mpi"
    else:
        with pytest.raises(BackendError, match="no MPI backend"):
            choose_backend(2, 0, backend="mpi")


def test_free_port_is_bindable_and_differs_between_calls():
    ports = {free_port() for _ in range(5)}
    assert len(ports) > 1
    for port in ports:
        check_port_free(port)  # does not raise


def test_port_in_use_is_detected():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(PortInUseError, match=f"port {port} on 127.0.0.1 is already in use"):
            check_port_free(port)


def test_privileged_or_invalid_port_is_refused():
    with pytest.raises(PortInUseError, match="outside 1024-65535"):
        check_port_free(80)
