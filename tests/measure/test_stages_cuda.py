import pytest
import torch

from hotloop.measure.bench import BenchConfig, run_bench
from hotloop.targets import BenchCase

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none visible here)"),
]


def test_device_events_time_each_stage_and_report_the_sync_gap():
    a = torch.randn(2048, 2048, device="cuda")

    def run(timer):
        with timer.stage("matmul"):
            for _ in range(4):
                a @ a

    result = run_bench(
        BenchCase("cuda-mm", run, device="cuda"), BenchConfig(warmup=2, iterations=5, progress=False)
    )
    data = result.to_dict()
    assert set(data["device_stages"]) == {"matmul"}
    assert data["device_stages"]["matmul"]["p50"] > 0
    assert "matmul" in data["sync_gap_ms"]
