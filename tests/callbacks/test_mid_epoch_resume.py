"""Resumed from a checkpoint saved mid-epoch inside ProgressiveResize's ramp, a run sees batch for batch what the
uninterrupted run saw: the image side (ProgressiveResize), the learning rate (StepwiseLR) and GPUAugmentation's
random stream; with and without gradient accumulation, and under DDP (2 CPU processes, gloo). Nothing is timed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mid_epoch_resume import STOP_AFTER, both
from trainer_helpers import ddp_script_env

pytestmark = [
    pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended"),
    pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`"),
]


@pytest.mark.parametrize("accumulate", [1, 2])
def test_every_batch_after_a_mid_epoch_resume_sees_what_the_uninterrupted_run_saw(tmp_path, accumulate):
    full, resumed = both(1, accumulate, tmp_path)
    assert resumed[0][:2] == [6, 2]  # the first batch after the resume: epoch 6, batch 2 (24 px; the epoch began at 16)
    assert [row[2] for row in full][:2] == [24, 24] and {row[2] for row in full} == {24, 32}
    assert resumed == full  # (epoch, batch, side, lr, augmentation stream), batch for batch


@pytest.mark.slow
@pytest.mark.ddp
def test_every_rank_resumed_mid_epoch_sees_what_it_saw_uninterrupted(tmp_path):
    script = Path(__file__).with_name("mid_epoch_resume.py")
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path), "2", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env=ddp_script_env(),
        cwd=script.parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in (0, 1):
        full = json.loads((tmp_path / f"full-rank{rank}.json").read_text())
        resumed = json.loads((tmp_path / f"resumed-rank{rank}.json").read_text())
        assert len(full) == 10 * 4 - STOP_AFTER and resumed == full
