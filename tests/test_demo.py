"""`lightning-efficient demo`: its bad-input errors, and the pieces it is made of."""

from __future__ import annotations

import json
import multiprocessing as mp
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import lightning_efficient.app.demo as demo
import lightning_efficient.app.runs as runs
from lightning_efficient.app.cli import build_parser, main
from lightning_efficient.app.data import check_data, digits_imagefolder
from lightning_efficient.app.table import add_time_to_target, format_table, plot_curves
from lightning_efficient.data.samples import balanced_subset


def _image_folder(root: Path, classes=("a", "b"), per_class=3, splits=("train", "val")) -> Path:
    for split in splits:
        for c in classes:
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                Image.new("RGB", (40, 30), (i * 40, 100, 200)).save(root / split / c / f"{i}.jpg")
    return root


def _run_cli(capsys, *args):
    code = main(["demo", "--no-progress", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize(
    "make, expect",
    [
        (lambda p: p / "nope", "no such folder"),
        (lambda p: (p / "x").mkdir() or (p / "x"), "train: missing"),
        (
            lambda p: ((p / "d" / "train").mkdir(parents=True), (p / "d" / "val").mkdir())[0] or (p / "d"),
            "no class folders",
        ),
        (lambda p: _image_folder(p / "d", per_class=0), "empty split"),
    ],
    ids=["missing", "no-splits", "no-classes", "empty-split"],
)
def test_bad_data_gives_one_line_and_exit_2(tmp_path, capsys, make, expect):
    root = make(tmp_path)
    code, out, err = _run_cli(capsys, "--data", str(root))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert expect in lines[0] and str(tmp_path) in lines[0]
    assert "Traceback" not in err + out


def test_unreadable_image_is_named(tmp_path, capsys):
    root = _image_folder(tmp_path / "d")
    bad = root / "train" / "b" / "broken.jpg"
    bad.write_bytes(b"this is not a jpeg")
    code, out, err = _run_cli(capsys, "--data", str(root), "--batch-size", "2")
    assert code == 2
    assert str(bad) in err and "unreadable image" in err and "delete or replace" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_truncated_jpeg_is_named(tmp_path, capsys, hymenoptera):
    root = _image_folder(tmp_path / "d")
    real = sorted((hymenoptera / "train" / "bees").glob("*.jpg"))[0].read_bytes()
    bad = root / "val" / "a" / "cut.jpg"
    bad.write_bytes(real[: len(real) // 3])
    code, _, err = _run_cli(capsys, "--data", str(root), "--batch-size", "2")
    assert code == 2 and str(bad) in err


def test_mismatched_classes(tmp_path, capsys):
    root = _image_folder(tmp_path / "d")
    shutil.rmtree(root / "val" / "b")
    code, _, err = _run_cli(capsys, "--data", str(root))
    assert code == 2 and "different class folders" in err


def test_too_few_images_for_one_batch(tmp_path, capsys):
    root = _image_folder(tmp_path / "d", per_class=2)
    code, _, err = _run_cli(capsys, "--data", str(root), "--batch-size", "32")
    assert code == 2 and "less than one batch" in err


def test_bad_flags_are_usage_errors(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--epochs", "0"])
    assert e.value.code == 2
    assert "--epochs: expected a positive int" in capsys.readouterr().err


@given(
    targets=st.lists(st.integers(0, 4), min_size=1, max_size=200),
    n=st.integers(0, 250),
    seed=st.integers(0, 10),
)
@settings(max_examples=60, deadline=None)
def test_balanced_subset_properties(targets, n, seed):
    idx = balanced_subset(targets, n, seed)
    assert idx == sorted(set(idx))
    assert len(idx) == (len(targets) if n <= 0 or n >= len(targets) else n)
    assert idx == balanced_subset(targets, n, seed)
    counts = Counter(targets[i] for i in idx)
    available = Counter(targets)
    # Balanced: a class gets fewer than another only when it ran out of images.
    for k in counts.values():
        for d in available:
            if counts.get(d, 0) < k - 1:
                assert counts.get(d, 0) == available[d]


def test_digits_fallback_is_a_real_imagefolder(tmp_path):
    pytest.importorskip("sklearn")
    root = digits_imagefolder(tmp_path, size=32)
    assert check_data(root) == root
    train = sorted(p for p in (root / "train").rglob("*.png"))
    val = sorted(p for p in (root / "val").rglob("*.png"))
    assert len(train) + len(val) == 1797 and len(val) == 1797 // 5
    assert sorted(d.name for d in (root / "train").iterdir()) == [str(i) for i in range(10)]
    with Image.open(train[0]) as img:
        assert img.size == (32, 32) and img.mode == "RGB"


def test_format_table_has_ratios_and_time_to_the_baselines_top1():
    base = dict(
        tuning_s=0.0,
        wall_time_s=100.0,
        images_per_s=50.0,
        data_wait_share=0.5,
        val_top1=0.4,
        peak_memory_mb=1000.0,
        precision="32-true",
        top1_curve=[(40.0, 0.2), (70.0, 0.35), (100.0, 0.4)],
    )
    eff = dict(
        tuning_s=4.0,
        wall_time_s=50.0,
        images_per_s=125.0,
        data_wait_share=0.1,
        val_top1=0.42,
        peak_memory_mb=900.0,
        precision="bf16-mixed",
        top1_curve=[(15.0, 0.3), (30.0, 0.41), (50.0, 0.42)],
    )
    results = {"baseline": base, "efficient": eff}
    add_time_to_target(results)
    assert base["time_to_target_s"] == 100.0 and eff["time_to_target_s"] == 30.0  # first validation >= 0.4
    table = format_table(results)
    assert "2.50x" in table and "0.50x" in table and "0.30x" in table and "bf16-mixed" in table
    assert "-40.0 pt" in table and "+2.0 pt" in table  # data wait and top-1: differences, not ratios
    assert len(table.splitlines()) == 9 and "tuning (inside the wall time)" in table
    eff["top1_curve"] = [(15.0, 0.3)]
    add_time_to_target(results)
    assert "not reached" in format_table(results)


def test_plot_curves_writes_a_png(tmp_path):
    side = dict(val_top1=0.4, precision="32-true", top1_curve=[(1.0, 0.2), (2.0, 0.4)])
    path = tmp_path / "curves.png"
    plot_curves({"baseline": side, "efficient": dict(side, top1_curve=[(0.5, 0.3), (1.0, 0.45)])}, str(path), "t")
    with Image.open(path) as img:
        assert img.format == "PNG" and img.width > 300


@pytest.mark.slow
def test_demo_end_to_end_on_real_images(tmp_path, hymenoptera):
    out = tmp_path / "demo.json"
    cmd = [
        sys.executable,
        "-m",
        "lightning_efficient",
        "demo",
        "--data",
        str(hymenoptera),
        "--train-images",
        "48",
        "--val-images",
        "16",
        "--image-size",
        "32",
        "--batch-size",
        "16",
        "--epochs",
        "1",
        "--workers",
        "1",  # the path a user runs: DataLoader workers inside the spawned training process
        "--no-progress",
        "--out",
        str(out),
        "--plot",
        str(tmp_path / "curves.png"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=420)  # ~80 s alone on 2 cores
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "efficient/baseline" in proc.stdout and "val top-1" in proc.stdout
    assert "worth measuring" not in proc.stdout.split("[efficient]")[1].split("ResNet-18 on")[0]  # tuned: no pointer
    assert "time to baseline's final top-1" in proc.stdout and "tune() took" in proc.stdout
    assert (tmp_path / "curves.png").stat().st_size > 0
    payload = json.loads(out.read_text())
    assert payload["train_images"] == 48 and payload["val_images"] == 16
    for side in ("baseline", "efficient"):
        r = payload["results"][side]
        assert r["images_per_s"] > 0 and 0 <= r["val_top1"] <= 1 and r["peak_memory_mb"] > 0
        assert 0 <= r["data_wait_share"] <= 1
    assert payload["results"]["baseline"]["precision"] == "32-true"
    assert set(payload["ratios"]) >= {"wall_time_s", "images_per_s", "val_top1"}
    for side in ("baseline", "efficient"):  # one validation per epoch, the last one is the final top-1
        curve = payload["results"][side]["top1_curve"]
        assert len(curve) == 1 and curve[-1][1] == pytest.approx(payload["results"][side]["val_top1"])
    tuned = payload["results"]["efficient"]["tuned"]
    assert tuned["chosen"].startswith(payload["results"]["efficient"]["precision"]) and tuned["tuning_s"] > 0
    assert set(tuned["measured"]) | set(tuned["by_rule"]) >= {"channels_last"} and tuned["reused_from"] is None
    assert payload["results"]["efficient"]["tuning_s"] == tuned["tuning_s"] and "measured " in proc.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=420)  # the second run reuses the decision
    assert again.returncode == 0 and "reused the decision stored in " in again.stdout, again.stderr[-3000:]


def test_the_runs_loader_workers_start_as_in_a_users_script(monkeypatch):
    """Each side trains in a spawned process, which inherits "spawn" as its start method: its DataLoader workers
    would import torch again inside the measured time. The run resets it to the platform's default."""
    seen, sent = [], []

    class Queue:
        def put(self, item):
            sent.append(item)

    monkeypatch.setattr(runs, "run_one", lambda *args: seen.append(mp.get_start_method()) or {"wall_time_s": 1.0})
    before = mp.get_start_method(allow_none=True)
    mp.set_start_method("spawn", force=True)  # as in the process that run_in_subprocess starts
    try:
        runs._child("baseline", demo.DemoConfig(data="unused"), [], [], Queue())
    finally:
        mp.set_start_method(before, force=True)
    assert seen == [mp.get_all_start_methods()[0]] and sent == [("ok", {"wall_time_s": 1.0})]


# ------------------------------------------------------------------------------- fallback data and --help


def test_missing_scikit_learn_is_the_only_output(monkeypatch, capsys):
    """Without scikit-learn the demo says so first and alone: nothing announces the digits it cannot write."""
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    code, out, err = _run_cli(capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert 'pip install "lightning_efficient[demo]"' in lines[0] and "scikit-learn" in lines[0] and "--data" in lines[0]
    assert "Traceback" not in err


def _record_run_demo(monkeypatch) -> list:
    """Replace the training by a recorder of the crop size it would use and the size of the images written."""
    seen: list = []

    def fake_run_demo(cfg, out=None, reports=True, plot=None):
        with Image.open(next(Path(cfg.data).rglob("*.png"))) as img:
            seen.append((cfg.image_size, img.size))
        return {}

    monkeypatch.setattr(demo, "run_demo", fake_run_demo)
    return seen


@pytest.mark.parametrize(("args", "size"), [((), 112), (("--image-size", "48"), 48)])
def test_digits_fallback_honours_image_size_and_says_it(monkeypatch, capsys, args, size):
    pytest.importorskip("sklearn")
    seen = _record_run_demo(monkeypatch)
    code, out, err = _run_cli(capsys, *args)
    assert code == 0, err
    assert seen == [(size, (size, size))]  # trained at the size the PNGs were written at, the one asked for
    assert f"{size} px" in out and "digits" in out


@pytest.mark.parametrize(("args", "size"), [((), 112), (("--image-size", "64"), 64)])
def test_image_size_with_data_defaults_to_112(tmp_path, monkeypatch, args, size):
    root = _image_folder(tmp_path / "d")
    parsed = build_parser().parse_args(["demo", "--data", str(root), *args])
    cfg = demo.DemoConfig(data=parsed.data, image_size=parsed.image_size, batch_size=2)

    def stop(paths):
        raise demo.UsageError("stop before training")

    monkeypatch.setattr(demo, "check_images", stop)
    with pytest.raises(demo.UsageError, match="stop before training"):
        demo.run_demo_with_fallback(cfg, None, reports=False)
    assert cfg.image_size == size


@pytest.mark.parametrize(
    ("args", "expected"), [((), None), (("--workers", "auto"), None), (("--workers", "0"), 0), (("--workers", "3"), 3)]
)
def test_workers_flag_auto_and_zero_mean_what_dataloader_means(args, expected):
    parsed = build_parser().parse_args(["demo", *args])
    assert parsed.workers == expected
    from lightning_efficient.data.loader import suggest_loader_kwargs

    auto = suggest_loader_kwargs(cuda=False).kwargs["num_workers"]
    assert demo.resolve_workers(parsed.workers) == (auto if expected is None else expected)


@pytest.mark.parametrize("bad", ["-1", "two", ""])
def test_workers_flag_rejects_bad_values(capsys, bad):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["demo", "--workers", bad])
    assert e.value.code == 2
    assert "--workers: expected 'auto' or an integer >= 0" in capsys.readouterr().err


def test_help_says_what_each_default_means(capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "'auto' (default) = as suggest_loader_kwargs()" in text and "on the CPU: a quarter of the cores" in text
    assert "0 = load in the main process" in text
    assert "default 0 = one per CPU core" not in text
    assert "default 112; scikit-learn's digits" in text and "written as PNGs of this size" in text


class _FakeProcess:
    """A training process that only records what the demo does to it."""

    def __init__(self, **kwargs) -> None:
        self.alive = self.terminated = False

    def start(self) -> None:
        self.alive = True

    def is_alive(self) -> bool:
        return self.alive

    def terminate(self) -> None:
        self.terminated, self.alive = True, False

    def join(self, timeout=None) -> None:
        pass


@pytest.mark.parametrize("interrupted", [True, False])
def test_an_interrupted_demo_stops_its_training_process(monkeypatch, interrupted):
    procs: list[_FakeProcess] = []

    class Queue:
        def get(self, timeout):
            if interrupted:
                raise KeyboardInterrupt  # Ctrl-C while the training process runs
            procs[-1].alive = False  # the run finished and sent its figures
            return ("ok", {"wall_time_s": 1.0})

    class Context:
        def Queue(self):
            return Queue()

        def Process(self, **kwargs):
            procs.append(_FakeProcess(**kwargs))
            return procs[-1]

    monkeypatch.setattr(runs.mp, "get_context", lambda method: Context())
    cfg = demo.DemoConfig(data="unused")
    if interrupted:
        with pytest.raises(KeyboardInterrupt):
            runs.run_in_subprocess("baseline", cfg, [], [])
    else:
        assert runs.run_in_subprocess("baseline", cfg, [], []) == {"wall_time_s": 1.0}
    assert procs[0].terminated is interrupted and not procs[0].alive
