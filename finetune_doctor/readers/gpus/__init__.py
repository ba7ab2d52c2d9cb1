"""Readers of GPU recordings: nvidia-smi tables, CSV and XML, rocm-smi/amd-smi JSON, npu-smi tables, and the config values `doctor gpus --config` reads."""
