"""Readers: one per input format, grouped by input family. Readers only read and type, never judge.

==============  ============================================================================================
config/         the LLaMA-Factory YAML (yamlcfg, yamlnodes), its key schema (keyschema), accelerate configs and
                launch lines (accelerate), the training stack's versions (stack)
deepspeed/      DeepSpeed JSON with positions (dsjson), "auto" as HF resolves it (dsauto, dsconfig), DeepSpeed's
                schema and checks (dsschema, dscheck, dsproblem)
model/          a model's config.json from wherever LLaMA-Factory would find it, the bundled catalogue, hub caches
data/           dataset_info.json entries and the files holding the rows (datasets), streamed rows (datarows,
                jsonarray)
runlogs/        what a run leaves: text logs of every rank (logs, logparse, logpatterns, logfailures, ...),
                trainer_log.jsonl and trainer_state.json, TensorBoard events, trackers, torchelastic error files,
                NCCL flight-recorder dumps, the run folder's layout
gpus/           GPU recordings: nvidia-smi (tables, CSV, XML), rocm-smi/amd-smi, npu-smi, and the config values
                ``doctor gpus --config`` reads
limits.py       the limits every reader applies to untrusted input
textfile.py     the one decoding policy for text files a user names
==============  ============================================================================================
"""
