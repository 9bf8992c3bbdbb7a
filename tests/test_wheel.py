"""The wheel and the sdist (``python -m build``): the wheel installs with ``--no-deps`` into a fresh virtual
environment that sees the already-installed dependencies through a ``.pth`` file (nothing is downloaded), and from
there ``lightning-efficient doctor`` and a short ``recipe()`` fit run."""

from __future__ import annotations

import functools
import os
import site
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

FIT = """
import pytorch_lightning as pl, torch
from torch.utils.data import DataLoader, TensorDataset
import lightning_efficient as le
assert "site-packages" in le.__file__ and "{root}" not in le.__file__, le.__file__

class Net(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    def training_step(self, batch, batch_idx):
        return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = TensorDataset(torch.rand(8, 3, 8, 8), torch.randint(0, 2, (8,)))
kw = le.recipe(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
trainer = pl.Trainer(**kw)
trainer.fit(Net(), DataLoader(data, batch_size=4))
print("fit ok", le.__version__, trainer.global_step)
"""


@pytest.mark.slow
def test_the_wheel_installs_offline_and_runs_doctor_and_a_fit(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (wheel,) = dist.glob("lightning_efficient-*.whl")
    (sdist,) = dist.glob("lightning_efficient-*.tar.gz")
    names = zipfile.ZipFile(wheel).namelist()
    assert "lightning_efficient/py.typed" in names and any(n.endswith("LICENSE") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/")) for n in names)
    assert any(n.endswith("/LICENSE") for n in tarfile.open(sdist).getnames())

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "installed_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_NO_INDEX"] = "1"  # nothing may be downloaded
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    run = functools.partial(subprocess.run, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    doctor = run([str(venv / "bin" / "lightning-efficient"), "doctor"])
    assert doctor.returncode == 0 and "torch" in doctor.stdout, doctor.stderr[-3000:]
    fit = run([str(py), "-c", FIT.replace("{root}", str(ROOT))])
    assert fit.returncode == 0 and "fit ok 0.2.0 2" in fit.stdout, fit.stderr[-3000:]
