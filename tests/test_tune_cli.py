"""`lightning-efficient tune`: tune() for a torchvision model by name, on synthetic input or an ImageFolder."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from lightning_efficient.app.cli import main

TINY = ["--image-size", "32", "--batch-size", "4", "--steps", "1", "1", "2", "--accelerator", "cpu"]


def _run(capsys, *args):
    code = main(["tune", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_synthetic_input_prints_the_table_the_choice_and_writes_json(tmp_path, capsys):
    out = tmp_path / "tune.json"
    code, text, err = _run(capsys, "--model", "mobilenet_v3_small", *TINY, "--out", str(out))
    assert code == 0, err
    assert "| settings | stage | images/s |" in text and "use it: Trainer(**recipe(precision=" in text
    assert "GPU available" not in text and "Tip:" not in text  # Lightning's chatter of the short fits is silenced
    # Notes in the command line's words, not tune()'s Python arguments.
    assert "num_workers not tuned: synthetic input (pass --data DIR" in text and "pass --compile" in text
    assert "num_workers=False" not in text and "compile=True" not in text and "precisions=[" not in text
    payload = json.loads(out.read_text())
    assert payload["chosen"]["precision"] == payload["recipe_kwargs"]["precision"]
    stages = [r["stage"] for r in payload["rows"]]
    assert "current" in stages and "channels_last (paired)" in stages
    assert "num_workers" not in stages  # synthetic input: nothing to load, workers not tuned
    measured = [r for r in payload["rows"] if r["status"] in ("ok", "chosen")]
    assert all(r["images_per_s"] > 0 for r in measured)
    assert sum(r["status"] == "chosen" for r in payload["rows"]) == 1


def test_image_folder_input_tunes_num_workers(tmp_path, capsys):
    for c in ("a", "b"):
        (tmp_path / "train" / c).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (48, 40), (30 * i, 90, 200 if c == "a" else 20)).save(tmp_path / "train" / c / f"{i}.jpg")
    out = tmp_path / "tune.json"
    code, text, err = _run(
        capsys, "--model", "resnet18", *TINY, "--data", str(tmp_path), "--workers", "0", "--out", str(out)
    )
    assert code == 0, err
    rows = json.loads(out.read_text())["rows"]
    assert any(r["stage"] == "num_workers (paired)" and "workers=1" in r["settings"] for r in rows)
    assert any(r["stage"] == "current" and r["settings"].endswith("workers=0") for r in rows)


def test_unknown_model_is_one_line_with_close_names(capsys):
    code, _, err = _run(capsys, "--model", "resnet19", *TINY)
    assert code == 2
    assert "resnet19" in err and "did you mean" in err and "resnet18" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_missing_data_folder_is_one_line(tmp_path, capsys):
    code, _, err = _run(capsys, "--model", "resnet18", *TINY, "--data", str(tmp_path / "nope"))
    assert code == 2 and "no such folder" in err and str(tmp_path / "nope") in err


@pytest.mark.parametrize("bad", [["--batch-size", "0"], ["--steps", "1", "0", "2"]])
def test_bad_numbers_are_usage_errors(capsys, bad):
    with pytest.raises(SystemExit) as e:
        main(["tune", *bad])
    assert e.value.code == 2
    assert "expected a positive int" in capsys.readouterr().err


def test_help_names_the_factors(capsys):
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for word in ("precision", "channels_last", "torch.compile", "num_workers", "--planned-steps"):
        assert word in text


def test_a_noisy_measurement_makes_the_advice_provisional_and_names_the_flag(capsys, monkeypatch):
    import lightning_efficient
    from lightning_efficient.functional.tuning import Candidate, Measurement, TuneResult
    from lightning_efficient.tuner import noise_note

    current = Candidate()
    noisy = [Measurement(current, "current", (60.0, 100.0, 80.0))]  # windows spread by 50%

    def fake_tune(*args, **kwargs):
        return TuneResult(
            current, current, noisy, ["chosen: the current settings (32-true)."], notes=[noise_note(noisy, current)]
        )

    monkeypatch.setattr(lightning_efficient, "tune", fake_tune)
    code, text, err = _run(capsys, "--model", "resnet18", *TINY)
    assert code == 0, err
    assert "the machine is noisy: windows of your own settings varied by 50%" in text
    assert "--steps WARMUP WINDOW REPEATS, e.g. --steps 2 3 6" in text and "window_steps" not in text
    advice = text[text.index("use it: Trainer(") :]
    assert "(provisional: the machine was noisy while measuring" in advice.splitlines()[1]
