"""`lightning-efficient tune`: tune() for a torchvision model by name, on synthetic input or an ImageFolder."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from lightning_efficient.app.cli import main

TINY = ["--image-size", "32", "--batch-size", "4", "--accelerator", "cpu"]


def _run(capsys, *args):
    code = main(["tune", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_synthetic_input_prints_the_table_the_advice_and_writes_json(tmp_path, capsys):
    out = tmp_path / "tune.json"
    one = ["--precisions", "32-true"]  # the same decisions on a CPU with and without native bf16
    code, text, err = _run(
        capsys, "--model", "mobilenet_v3_small", *TINY, *one, "--max-seconds", "1e-6", "--out", str(out)
    )
    assert code == 0, err
    assert "| factor | tried | in use |" in text and "use it: Trainer(**recipe(precision=" in text
    assert "GPU available" not in text and "Tip:" not in text  # Lightning's chatter of the short fits is silenced
    assert "compile=True" not in text and "precisions=[" not in text  # no Python words in the notes
    payload = json.loads(out.read_text())
    assert payload["chosen"]["precision"] in text and {d["factor"] for d in payload["decisions"]} == {"channels_last"}
    again = _run(capsys, "--model", "mobilenet_v3_small", *TINY, *one, "--max-seconds", "1e-6")[1]
    assert "reused from " in again  # the second run reuses the stored decision
    assert "reused from " not in _run(capsys, "--model", "mobilenet_v3_small", *TINY, *one, "--no-cache")[1]


def test_image_folder_input_measures_num_workers(tmp_path, capsys):
    for c in ("a", "b"):
        (tmp_path / "train" / c).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (48, 40), (30 * i, 90, 200 if c == "a" else 20)).save(tmp_path / "train" / c / f"{i}.jpg")
    out = tmp_path / "tune.json"
    code, text, err = _run(
        capsys,
        "--model",
        "resnet18",
        *TINY,
        "--data",
        str(tmp_path),
        "--workers",
        "1",
        "--max-seconds",
        "1e-6",
        "--out",
        str(out),
    )
    assert code == 0, err
    payload = json.loads(out.read_text())
    assert payload["current"]["num_workers"] == 1 and "num_workers" in {d["factor"] for d in payload["decisions"]}


def test_unknown_model_is_one_line_with_close_names(capsys):
    code, _, err = _run(capsys, "--model", "resnet19", *TINY)
    assert code == 2 and "resnet19" in err and "did you mean" in err and "resnet18" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_missing_data_folder_is_one_line(tmp_path, capsys):
    code, _, err = _run(capsys, "--model", "resnet18", *TINY, "--data", str(tmp_path / "nope"))
    assert code == 2 and "not an ImageFolder root" in err and str(tmp_path / "nope") in err


@pytest.mark.parametrize(
    "bad,says",
    [
        (["--batch-size", "0"], "expected a positive"),
        (["--max-seconds", "-1"], "expected a positive"),
        (["--budget", "0"], "expected a positive"),
        (["--budget", "2"], "expected a fraction in (0, 1], e.g. 0.05"),  # never clamped silently
    ],
)
def test_bad_numbers_are_usage_errors(capsys, bad, says):
    with pytest.raises(SystemExit) as e:
        main(["tune", *bad])
    assert e.value.code == 2 and says in capsys.readouterr().err


def test_an_unknown_model_without_close_names_still_suggests_some(capsys):
    code, _, err = _run(capsys, "--model", "nosuchnet", *TINY)
    assert code == 2 and "did you mean e.g. resnet18" in err and "did you mean ?" not in err


def test_help_names_the_factors_and_the_budget(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for word in ("precision", "channels_last", "torch.compile", "num_workers", "--budget", "--max-seconds"):
        assert word in text


def _folder(root, bad: bool = False):
    for c in ("a", "b"):
        (root / "train" / c).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (48, 40), (30 * i, 90, 200 if c == "a" else 20)).save(root / "train" / c / f"{i}.jpg")
    if bad:
        (root / "train" / "a" / "0.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg after all")
    return root


def _one_line_usage_error(code, text, err, *words):
    assert code == 2 and "Traceback" not in err + text
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lightning-efficient tune: error: "), err
    for word in words:
        assert word in lines[0], lines[0]


def test_a_corrupt_image_under_data_is_one_line_naming_the_file(tmp_path, capsys):
    root = _folder(tmp_path, bad=True)
    code, text, err = _run(capsys, "--model", "resnet18", *TINY, "--data", str(root), "--workers", "0", "--no-cache")
    _one_line_usage_error(code, text, err, "--data", str(root / "train" / "a" / "0.jpg"))


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_a_precision_lightning_does_not_take_is_one_line(precision, capsys):
    code, text, err = _run(capsys, "--model", "resnet18", *TINY, "--precisions", precision)
    _one_line_usage_error(code, text, err, "--precisions", repr(precision), "'32-true'")


def test_out_into_a_missing_folder_fails_before_measuring(tmp_path, capsys, monkeypatch):
    import lightning_efficient

    monkeypatch.setattr(lightning_efficient, "tune", lambda *a, **k: pytest.fail("measured before checking --out"))
    code, text, err = _run(capsys, "--model", "resnet18", *TINY, "--out", str(tmp_path / "missing" / "tune.json"))
    _one_line_usage_error(code, text, err, "--out", str(tmp_path / "missing"), "does not exist")
    code, text, err = _run(capsys, "--model", "resnet18", *TINY, "--out", str(tmp_path))
    _one_line_usage_error(code, text, err, "--out", "a folder")


def test_an_absent_accelerator_is_one_line(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present here")
    code, text, err = _run(capsys, "--model", "resnet18", "--image-size", "32", "--accelerator", "cuda")
    _one_line_usage_error(code, text, err, "--accelerator")
