"""Readers of what a run leaves: text logs of every rank, trainer_log.jsonl/trainer_state.json, TensorBoard events, trackers, torchelastic error files, NCCL flight-recorder dumps."""
