"""The lint path stays light: importing the package and running `doctor lint` load no torch, transformers or
deepspeed (DESIGN.md)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "deepspeed", "peft", "tensorboard", "matplotlib")


def _loaded_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=ROOT, check=True,
                         env={"FINETUNE_DOCTOR_NO_NVML": "1", "PATH": "/usr/bin:/bin"})
    return set(out.stdout.split())


def test_import_package_is_light():
    mods = _loaded_after("import finetune_doctor")
    assert not {m for m in mods if m.split(".")[0] in HEAVY}


def test_lint_run_is_light():
    cfg = ROOT / "fixtures" / "llamafactory" / "examples" / "train_lora" / "qwen3_lora_sft_ds3.yaml"
    code = ("from click.testing import CliRunner\nfrom finetune_doctor.cli import main\n"
            f"r = CliRunner().invoke(main, ['lint', {str(cfg)!r}])\nassert r.exit_code in (0, 1), r.output")
    mods = _loaded_after(code)
    assert not {m for m in mods if m.split(".")[0] in HEAVY}, sorted(m for m in mods if m.split(".")[0] in HEAVY)
