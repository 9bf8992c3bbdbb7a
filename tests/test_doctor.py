"""`lightning-efficient doctor`."""

from lightning_efficient import recommended_precision
from lightning_efficient.cli import main
from lightning_efficient.doctor import diagnose


def test_doctor_prints_the_environment_and_what_to_use(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for topic in ("torch:", "CPU:", "kornia:", "PIL:", "precision:", "DataLoader:"):
        assert topic in out
    assert f"Trainer(precision={recommended_precision()!r})" in out


def test_doctor_findings_are_typed():
    findings = diagnose()
    assert all(f.ok in (True, False, None) for f in findings)
    kornia = next(f for f in findings if f.topic == "kornia")
    assert kornia.ok is True  # kornia >= 0.9 is a dependency
