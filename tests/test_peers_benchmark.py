"""The peers benchmark (``benchmarks/peers``): the schedule every side is held to, the report's arithmetic, and
``--quick`` end to end for every side whose environment is built (``bash benchmarks/peers/envs.sh``; ``make test``
builds ``.venv-peers``, not Composer's). Nothing is timed: the figures of a quick run are not looked at."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.harness import machine
from benchmarks.peers import report
from benchmarks.peers.__main__ import ROOT, SIDES, kept_runs, skip_reason
from benchmarks.peers.spec import Spec, lr_at


@settings(max_examples=40, deadline=None)
@given(
    epochs=st.integers(2, 6),
    warmup=st.integers(1, 2),
    steps=st.integers(1, 9),
    lr=st.floats(1e-3, 1.0),
)
def test_the_shared_schedule_is_torchs_warmup_then_cosine_stepped_per_optimizer_step(epochs, warmup, steps, lr):
    warmup = min(warmup, epochs - 1)
    spec = Spec(side="x", seed=0, data="", train_list="", val_file="", out="", epochs=epochs, lr=lr)
    spec.warmup_epochs = warmup
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    total, w = epochs * steps, warmup * steps
    sched = torch.optim.lr_scheduler.SequentialLR(
        opt,
        [
            torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=w),
            torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total - w),
        ],
        milestones=[w],
    )
    for k in range(total):
        assert lr_at(k, spec, steps) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-9, abs=1e-12)
        sched.step()


def _run(side: str, seed: int, finals: list[float], seconds: list[float]) -> dict:
    return {
        "side": side,
        "seed": seed,
        "final_top1": finals[-1],
        "points": [{"train_s": t, "top1": a} for t, a in zip(seconds, finals, strict=True)],
        "images_per_s": 10.0,
        "setup_s": 1.0,
        "train_s": seconds[-1],
    }


def test_the_common_target_is_the_weakest_peers_mean_and_ratios_use_the_mean_curves():
    runs = [
        _run("ours", 0, [0.2, 0.4, 0.5], [10, 20, 30]),
        _run("ours", 1, [0.3, 0.5, 0.5], [10, 20, 30]),
        _run("timm", 0, [0.1, 0.3, 0.45], [20, 40, 60]),
        _run("timm", 1, [0.1, 0.35, 0.45], [20, 40, 60]),
        _run("fastai", 0, [0.2, 0.4, 0.52], [15, 30, 45]),
        _run("fastai", 1, [0.2, 0.4, 0.52], [15, 30, 45]),
        _run("lightning", 0, [0.1, 0.2, 0.3], [20, 40, 60]),  # never sets the target
        _run("lightning", 1, [0.1, 0.2, 0.3], [20, 40, 60]),
    ]
    summary = report.summarise(runs)
    assert summary["target"] == pytest.approx(0.45)  # timm's mean final top-1, the lowest among the peers
    assert summary["sides"]["ours"]["time_to_target_s"] == [30, 20]
    assert summary["sides"]["ours"]["mean_curve_time_to_target_s"] == 20  # mean top-1 at 20 s: 0.45
    assert summary["fastest_peer"] == "fastai" and summary["sides"]["fastai"]["mean_curve_time_to_target_s"] == 45
    assert summary["sides"]["timm"]["mean_curve_time_to_target_s"] == 60
    assert summary["ratios"]["ours_over_fastest_peer_time_to_target"] == pytest.approx(20 / 45)
    assert math.isnan(summary["sides"]["lightning"]["mean_curve_time_to_target_s"])
    body, _ = report.render(runs, _settings(), {"composer": "not built"}, {}, "peers")
    assert "**45.0%**" in body and "composer (not built)" in body


def test_the_report_names_each_figure_where_a_peer_is_ahead_and_why():
    runs = [
        _run("ours", 0, [0.2, 0.5], [10, 20]) | {"images_per_s": 80.0, "setup_s": 7.0, "tuned": {"tuning_s": 4.5}},
        _run("ours", 1, [0.2, 0.5], [10, 20]) | {"images_per_s": 80.0, "setup_s": 5.0, "tuned": {"tuning_s": 0.1}},
        *(_run("composer", s, [0.1, 0.3], [10, 30]) | {"images_per_s": 90.0} for s in (0, 1)),
        *(_run("fastai", s, [0.2, 0.6], [10, 40]) | {"setup_s": 8.0} for s in (0, 1)),
        *(_run("lightning", s, [0.1, 0.7], [10, 40]) for s in (0, 1)),  # never counts as a peer
    ]
    body, _ = report.render(runs, _settings(), {}, {}, "peers")
    ahead = body.split("Where a peer is ahead of ours:")[1].split("\n\n")[1].splitlines()
    assert ahead[0].startswith("- **fastai**, top-1: 60.0% against ours' 50.0%: its batch augmentation is milder")
    assert ahead[1].startswith("- **composer**, images/s: 90.0 against ours' 80.0: its ProgressiveResizing")
    assert ahead[2] == (
        "- **composer**, set-up: 1 s against ours' 6 s: ours' set-up includes tune(): 4.5 s in the run that tuned, "
        "0.1 s in a run that reused the stored decision."
    )
    assert len(ahead) == 3  # fastai's slower set-up and all of plain Lightning are not listed


def _settings() -> dict:
    return dict(
        train_images=8, val_images=4, size=32, batch_size=4, epochs=3, lr=0.1, weight_decay=0.0, warmup_epochs=1,
        seeds=[0, 1], workers=1,
    )  # fmt: skip


def test_without_a_peer_the_report_names_its_target_as_the_sides_own_and_claims_no_lead():
    runs = [_run("ours", 0, [0.2, 0.4, 0.5], [10, 20, 30]), _run("ours", 1, [0.3, 0.5, 0.5], [10, 20, 30])]
    body, summary = report.render(runs, {**_settings(), "val_every": 0.5}, {}, {}, "peers_partial")
    assert summary["fastest_peer"] is None and summary["target"] == pytest.approx(0.5)
    assert "No peer ran: the target is the lowest mean final top-1 of the sides run, 50.0%." in body
    assert "Common target" not in body and "not** reach" not in body


def test_kept_runs_come_from_a_finished_run_with_the_same_settings_and_the_report_says_so(tmp_path):
    settings = {**_settings(), "data": "d", "val_every": 0.5}
    runs = [_run("timm", 0, [0.1, 0.3, 0.45], [20, 40, 60]), _run("timm", 1, [0.1, 0.35, 0.45], [20, 40, 60])]
    finished = tmp_path / "peers.json"
    here = machine()
    finished.write_text(json.dumps({"settings": settings, "runs": runs, "machine": {**here, "commit": "abc1234"}}))
    kept = kept_runs(finished, ["timm"], settings)
    assert sorted(kept) == [("timm", 0), ("timm", 1)]
    assert kept["timm", 1]["points"] == runs[1]["points"]
    assert kept["timm", 0]["kept_from"] == f"{here['date']}, commit abc1234, {here['cpu']}"
    assert kept_runs(None, [], settings) == {}
    ours = [_run("ours", 0, [0.2, 0.4, 0.5], [10, 20, 30]), _run("ours", 1, [0.3, 0.5, 0.5], [10, 20, 30])]
    body, _ = report.render([*ours, *kept.values()], settings, {}, {}, "peers")
    assert f"Kept from an earlier run of this benchmark with the same settings ({here['date']}" in body
    assert "timm (seed 0), timm (seed 1)" in body
    with pytest.raises(SystemExit, match="other settings.*'epochs': \\(3, 4\\)"):
        kept_runs(finished, ["timm"], {**settings, "epochs": 4})
    with pytest.raises(SystemExit, match="no run for \\[\\('timm', 2\\)\\]"):
        kept_runs(finished, ["timm"], {**settings, "seeds": [0, 2]})
    with pytest.raises(SystemExit, match="needs --keep-from"):
        kept_runs(None, ["timm"], settings)
    with pytest.raises(SystemExit, match="unknown \\['tim'\\]"):
        kept_runs(finished, ["tim"], settings)
    elsewhere = {**here, "cpu": "Another CPU, 64 cores"}
    finished.write_text(json.dumps({"settings": settings, "runs": runs, "machine": elsewhere}))
    with pytest.raises(SystemExit, match="ran on another CPU .*Another CPU, 64 cores"):
        kept_runs(finished, ["timm"], settings)


def test_only_sides_that_set_no_headline_figure_can_be_left_out(tmp_path, monkeypatch):
    from benchmarks.peers.__main__ import OPTIONAL, main

    assert set(OPTIONAL) == {s.name for s in SIDES} - set(report.PEERS) - {"ours", "ours without progressive resizing"}
    for folder in ("train", "val"):
        (tmp_path / folder).mkdir()
    monkeypatch.setattr(sys, "argv", ["peers", "--data", str(tmp_path), "--skip", "lightning,composer"])
    with pytest.raises(SystemExit, match="\\['composer'\\] cannot be left out"):
        main()


@pytest.mark.slow
def test_quick_runs_every_side_whose_environment_is_built(tmp_path):
    """``--quick``: each side trains end to end in its own process and environment and writes its curve; the
    sides whose environment is absent are named as skipped. The schedule each side really stepped is checked
    against the shared one (ours and timm: exactly; fastai's warmup is a cosine ramp, Composer's lags one step)."""
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.peers", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((Path(run.stdout.strip().splitlines()[-1].split("wrote ")[-1])).with_suffix(".json").read_text())
    ran = {r["side"] for r in data["runs"]}
    expected = {s.name for s in SIDES if skip_reason(s) is None}
    assert ran == expected and set(data["skipped"]) == {s.name for s in SIDES} - expected
    assert {"lightning", "ours", "ours without progressive resizing"} <= ran
    for r in data["runs"]:
        assert len(r["points"]) == 4 and r["images"] > 0 and 0 <= r["final_top1"] <= 1  # 2 epochs, half-epoch points
        if r["side"] in ("ours", "ours without progressive resizing", "timm"):
            assert r["lr_max_deviation"] < 1e-6, (r["side"], r["lrs"])
