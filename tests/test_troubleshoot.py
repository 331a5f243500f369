"""troubleshoot(): raw failure logs become a cause and a fix; the most specific pattern wins."""

from __future__ import annotations

import pytest

from envbuilder.troubleshoot import troubleshoot

CASES = [
    ("error: failed to write to file `/root/.cache/uv/x/torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl`: "
     "No space left on device (os error 28)", "disk is full"),
    ("ImportError: flash_attn_2_cuda.so: undefined symbol: _ZN3c105ErrorC2E", "ABI mismatch"),
    # seen on the H100: TE 2.14.1's cu13 core with torch 2.11.0+cu130's nvidia-cublas 13.1.0.3
    ("OSError: /x/transformer_engine/wheel_lib/libtransformer_engine.so: undefined symbol: "
     "cublasLtGroupedMatrixLayoutInit_internal, version libcublasLt.so.13", "CUDA library in the environment is older"),
    ("RuntimeError: CUDA error: no kernel image is available for execution on the device", "architecture"),
    ("error: dns error: failed to lookup address information", "DNS"),
    ("invalid peer certificate: UnknownIssuer", "TLS verification failed"),
    ("ModuleNotFoundError: No module named 'torch'", "isolated environment"),
    ("nvidia_resiliency_ext-0.5.0-cp312-cp312-manylinux_2_39_x86_64.whl is not supported on this platform",
     "newer glibc"),
    ("g++: fatal error: Killed signal terminated program cc1plus", "ran out of memory"),
]


@pytest.mark.parametrize(("log", "needle"), CASES)
def test_advice(log: str, needle: str) -> None:
    advice = troubleshoot(log)
    assert advice is not None and needle in advice.cause


def test_a_wheel_name_alone_is_not_a_glibc_problem() -> None:
    assert troubleshoot("Downloaded torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl") is None
