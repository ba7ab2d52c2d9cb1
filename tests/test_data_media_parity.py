"""Media tokens against the real thing: LLaMA-Factory 0.9.5's own Qwen-VL plugins (``process_messages``) with
transformers' Qwen2-VL image processor count the ``<|image_pad|>`` tokens of images of several shapes, and the
doctor's count (analyzers/data/media.py through analyzers/memory/vision.py) must equal them.

LF's mm_plugin imports torchaudio at module level but never uses it for images; it runs in a subprocess with an
empty torchaudio stub so that nothing leaks into this test session. Videos are not compared: transformers' video
processors need torchvision, which the test extra does not install.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from finetune_doctor.analyzers.memory.vision import image_tokens

pytestmark = pytest.mark.slow

SIZES = [(640, 480), (10, 10), (3000, 20), (1, 5000), (4000, 3000), (1920, 1080), (300, 29)]

SCRIPT = r"""
import importlib.machinery, json, sys, types
stub = types.ModuleType("torchaudio"); stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
sys.modules.setdefault("torchaudio", stub)
from llamafactory.data.mm_plugin import get_mm_plugin
from transformers import Qwen2VLImageProcessorPil
from PIL import Image
out = {}
for family, patch in (("qwen2_vl", 14), ("qwen3_vl", 16)):
    proc = types.SimpleNamespace(image_max_pixels=768 * 768, image_min_pixels=32 * 32)
    proc.image_processor = proc.video_processor = Qwen2VLImageProcessorPil(patch_size=patch, merge_size=2,
                                                                          min_pixels=3136, max_pixels=12845056)
    plugin = get_mm_plugin(family, image_token="<|image_pad|>", video_token="<|video_pad|>")
    for w, h in json.loads(sys.argv[1]):
        msgs = plugin.process_messages([{"role": "user", "content": "<image>hi"}], [Image.new("L", (w, h))], [], [],
                                       proc)
        out[f"{family} {w}x{h}"] = msgs[0]["content"].count("<|image_pad|>")
print(json.dumps(out))
"""


def test_image_tokens_equal_llamafactory_and_transformers():
    pytest.importorskip("llamafactory")
    pytest.importorskip("PIL")
    pytest.importorskip("torch")
    run = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(SIZES)], capture_output=True, text=True,
                         timeout=300)
    if run.returncode != 0 and "ModuleNotFoundError" in run.stderr:
        pytest.skip(run.stderr.strip().splitlines()[-1])
    assert run.returncode == 0, run.stderr[-2000:]
    lf = json.loads(run.stdout.strip().splitlines()[-1])
    mine = {f"{fam} {w}x{h}": image_tokens(w, h, patch=patch, merge=2)
            for fam, patch in (("qwen2_vl", 14), ("qwen3_vl", 16)) for w, h in SIZES}
    assert mine == lf
