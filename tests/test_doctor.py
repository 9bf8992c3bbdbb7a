"""`lightning-efficient doctor`."""

import torch

from lightning_efficient import recommended_precision
from lightning_efficient.app.cli import main
from lightning_efficient.app.doctor import diagnose
from lightning_efficient.functional.efficiency import Check


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
