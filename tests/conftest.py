import os
import sys
from pathlib import Path

# CPU-only test machines may still carry an NVIDIA library; tests never read real GPUs unless marked gpu.
os.environ.setdefault("FINETUNE_DOCTOR_NO_NVML", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
