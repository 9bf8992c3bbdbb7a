"""`lightning-efficient doctor`."""

import os
import subprocess
import sys

import pytest
import torch

from lightning_efficient import recommended_precision
from lightning_efficient.app.cli import main
from lightning_efficient.doctor import diagnose
from lightning_efficient.functional.check import Check


def test_doctor_prints_the_environment_and_what_to_use(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for topic in ("torch:", "CPU:", "kornia:", "PIL:", "precision:", "DataLoader:"):
        assert topic in out
    assert f"Trainer(precision={recommended_precision()!r})" in out


def test_doctor_findings_say_what_is_checked_and_what_is_information():
    findings = {f.practice: f for f in diagnose()}
    assert all(isinstance(f, Check) and f.detail for f in findings.values())
    assert findings["kornia"].ok is True  # kornia >= 0.9 is a dependency
    assert findings["precision"].ok is True and recommended_precision() in findings["precision"].detail
    for info in ("python", "torch", "CPU", "DataLoader"):
        assert findings[info].ok is None  # information only, never a verdict
    assert findings["torch"].detail.startswith(torch.__version__)


def test_pillow_simd_advice_is_the_command_to_run(monkeypatch, capsys):
    """A pip user gets the install command itself, not a pointer to a README they may not have."""
    import lightning_efficient.data.decode as decode
    import lightning_efficient.doctor as doctor

    monkeypatch.setattr(doctor, "cpu_flags", lambda: frozenset({"avx2", "sse4_2"}))
    monkeypatch.setattr(decode, "pil_flavour", lambda: "Pillow 13.0.0")
    pil = {f.practice: f for f in diagnose()}["PIL"]
    assert doctor.PILLOW_SIMD_INSTALL == (  # the README's Pillow-SIMD section gives the same command
        'pip uninstall -y pillow && CC="cc -mavx2" pip install --no-cache-dir --force-reinstall --no-binary :all: '
        "pillow-simd"
    )
    assert doctor.PILLOW_SIMD_INSTALL in pil.advice
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert doctor.PILLOW_SIMD_INSTALL in out


def test_doctor_advice_never_points_at_the_readme(monkeypatch):
    import lightning_efficient.data.decode as decode
    import lightning_efficient.doctor as doctor

    for flags in (frozenset(), frozenset({"avx2"})):
        monkeypatch.setattr(doctor, "cpu_flags", lambda flags=flags: flags)
        for flavour in ("Pillow 13.0.0", "Pillow-SIMD 9.5.0.post1"):
            monkeypatch.setattr(decode, "pil_flavour", lambda flavour=flavour: flavour)
            for check in diagnose():
                assert "README" not in check.advice and "README" not in check.detail, check


def test_doctor_report_is_public_and_is_what_the_command_prints(capsys):
    import lightning_efficient as le

    text = le.doctor_report()
    assert text.startswith("lightning-efficient doctor\n")
    assert main(["doctor"]) in (0, None)
    assert capsys.readouterr().out.strip() == text.strip()
    # One line per check, each with its mark; advice follows on its own "->" line.
    lines = [line.strip() for line in text.splitlines()[1:]]
    assert sum(line.startswith(("[x]", "[ ]", "[i]")) for line in lines) == len(diagnose())
    assert all(line.startswith(("[x]", "[ ]", "[i]", "->")) for line in lines)


def test_a_torchvision_that_does_not_match_torch_stops_the_import_with_the_fix(tmp_path):
    # A torchvision built for another torch fails inside its own import; this one fails as such a build does.
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_efficient", "doctor"], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode != 0
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith("ImportError: lightning_efficient needs torchvision built for the installed torch")
    assert f"torch {torch.__version__}" in message and "torchvision::nms does not exist" in message
    assert "pip install torch==" in message and "torchvision==" in message


@pytest.mark.parametrize("cuda_build", ["13.0", None])
def test_a_cuda_build_of_torch_without_a_gpu_is_named_with_the_cpu_build(monkeypatch, cuda_build):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", cuda_build)
    (devices,) = [c for c in diagnose() if c.practice == "CUDA devices"]
    assert devices.ok is None and devices.detail.startswith("none visible: training runs on the CPU")
    assert ("CUDA 13.0 build" in devices.detail and "whl/cpu" in devices.detail) == (cuda_build is not None)
