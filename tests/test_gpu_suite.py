"""benchmarks/gpu_suite.py --dry-run: the GPU suite's code paths on the CPU, so it keeps working without a GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_suite_dry_run_runs_every_part_and_writes_its_results(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--dry-run", "--results", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for name in ("cuda_tests", "trainer_resnet50", "input_pipeline"):
        data = json.loads((tmp_path / f"{name}_dryrun.json").read_text())
        assert not data.get("failed"), data.get("error")
        assert (tmp_path / f"{name}_dryrun.md").read_text().startswith("# GPU suite part")
    cuda = json.loads((tmp_path / "cuda_tests_dryrun.json").read_text())
    assert cuda["counts"].get("skipped", 0) >= 5 and "failed" not in cuda["counts"]
    trainer = json.loads((tmp_path / "trainer_resnet50_dryrun.json").read_text())
    assert set(trainer["values"]) == {
        "32-true NCHW",
        "32-true + ChannelsLast",
        "bf16-mixed NCHW",
        "bf16-mixed + ChannelsLast",
        "16-mixed + ChannelsLast",
        "recipe()",
        "recipe(efficiency_report=False)",
    }
    assert all(v > 0 for values in trainer["values"].values() for v in values)
    pipeline = json.loads((tmp_path / "input_pipeline_dryrun.json").read_text())
    (setting,) = pipeline["workers"].values()
    assert len(setting["values"]) == 3 and all(v[0] > 0 for v in setting["values"].values())
    # EfficiencyReport measured each variant (its data-wait share is a fraction).
    assert all(0 <= r[-1]["data_wait_share"] <= 1 for r in pipeline["efficiency_reports"].values())


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA this would run the whole GPU suite")
def test_gpu_suite_without_cuda_and_without_dry_run_says_so() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--only", "a"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--dry-run" in proc.stdout


def test_gpu_suite_rejects_an_unknown_part() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py"), "--dry-run", "--only", "x"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "unknown part" in proc.stderr
