"""Causes that an exception's text establishes about how the run was launched, sized or set to a precision, not
about the training code (``ev.crash.cause`` kinds ``launch`` and ``fp16-grads``, called from crashcause.py
`crash_cause`).

- DeepSpeed without a distributed launcher: LLaMA-Factory refuses it at start-up in the releases that check it
  (hparams/parser.py:471-472 at the snapshot: ``Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training.``;
  ``llamafactory-cli train`` starts torchrun by itself only when more than one GPU is visible or FORCE_TORCHRUN is
  set, launcher.py:60-62); where nothing checks, the model is never wrapped in a DeepSpeedEngine and HF's Trainer
  fails at the first checkpoint save on the engine's method (transformers trainer.py
  ``_save_optimizer_and_scheduler``: ``self.model_wrapped.save_checkpoint(output_dir)`` when
  ``is_deepspeed_enabled``; LLaMA-Factory #4077, fixed by launching single-GPU DeepSpeed runs through torchrun).
- A rendezvous that not every process reached: c10d's TCPStore on the master, ``Timed out after {} seconds waiting
  for clients. {}/{} clients joined.`` (torch 2.13 libtorch_cpu's own format string).
- vLLM's engine with no room for its KV cache (the rollout engine of TRL/verl/OpenRLHF and LLaMA-Factory's vllm
  inference): its messages end in "Try increasing `gpu_memory_utilization` ..." (vllm's KV-cache check:
  ``No available memory for the cache blocks.``, ``The model's max seq len (N) is larger than the maximum number of
  tokens that can be stored in KV cache (M).``).
- fp16 gradients under fp16 mixed precision: torch's GradScaler refuses them (torch/amp/grad_scaler.py:274-275 in
  torch 2.13, ``_unscale_grads_``: ``raise ValueError("Attempting to unscale FP16 gradients.")``); the trainable
  parameters were fp16. peft upcasts fp16/bf16 adapter weights to fp32 where ``autocast_adapter_dtype`` applies
  (peft 0.18.1 peft_model.py:80-83, default True); LLaMA-Factory upcasts trainable parameters unless pure_bf16
  (reference/llamafactory/LF_FACTS.md §2).
"""

from __future__ import annotations

import re

from finetune_doctor.analyzers.postmortem.kindwords import layer_cause

# the methods HF's Trainer and accelerate call on the DeepSpeedEngine that deepspeed.initialize returns
# (deepspeed/runtime/engine.py); a model object asked for one was never wrapped
ENGINE_METHODS = ("save_checkpoint", "load_checkpoint", "zero_optimization_stage", "zero_optimization_partition_gradients",
                  "is_gradient_accumulation_boundary", "set_gradient_accumulation_boundary")
NO_ENGINE_ATTR = re.compile(r"'(?P<obj>\w+)' object has no attribute '(?P<attr>" + "|".join(ENGINE_METHODS) + r")'")
# the same message retyped from a screenshot (LlamaFactory#4077: "GemmaForCausalLM'obiect has no attribute"save
# checkpoint"): quotes lost or swapped, "object" misspelt, the underscore read as a space
NO_ENGINE_TYPED = re.compile(r"(?P<obj>[A-Z]\w+)\W{0,3}\s*ob[ij]e?ct has no attribute\W{0,3}\s*"
                             r"(?P<attr>save[ _]checkpoint|load[ _]checkpoint|zero[ _]optimization[ _]stage)\b")
FORCE_TORCHRUN = re.compile(r"Please use `?FORCE_TORCHRUN=1`? to launch DeepSpeed training")
# torch's embedding on a weight that is not a matrix (aten/src/ATen/native/Embedding.cpp ``embedding_symint``:
# ``TORCH_CHECK(weight.dim() == 2, "'weight' must be 2-D")``): ZeRO-3 keeps a partitioned parameter as an empty 1-D
# placeholder until the engine's gather hook runs (deepspeed/runtime/zero/partition_parameters.py), FSDP flattens
# and shards it into 1-D; LlamaFactory#4557: a ZeRO-3 config on one GPU started without torchrun; arcee-ai/DistillKit#3:
# a teacher model never passed to deepspeed.initialize
WEIGHT_NOT_2D = re.compile(r"(?<!\w)['\"‘’`]?weight['\"‘’`]? must be 2-?D\b", re.I)
CLIENTS_JOINED = re.compile(r"Timed out after (?P<sec>\d+) seconds waiting for clients\. (?P<got>\d+)/(?P<want>\d+) "
                            r"clients joined")
VLLM_KV = re.compile(r"No available memory for the cache blocks|stored in KV cache \((?P<kv>\d+)\)|"
                     r"Try increasing `gpu_memory_utilization`")
VLLM_MAXLEN = re.compile(r"max seq len \((?P<len>\d+)\)")


# c10d's TCPStore server (the format string in torch 2.13's libtorch_cpu: "The server socket has failed to listen on
# any local network address. port: {}, useIpv6: {}, code: {}, name: {}, message: {}"), and older torch's bare
# "Address already in use"
ADDR_IN_USE = re.compile(r"failed to listen on any local network address\. port: (?P<port>\d+).*EADDRINUSE"
                         r"|^Address already in use$")
# gloo's TCP pair (gloo/transport/tcp/pair.cc: "[file:line] Connection closed by peer [addr]:port", "Connection
# reset by peer"): the other end went away
GLOO_PEER = re.compile(r"gloo/transport/tcp/pair\.cc:\d+\] (?:Connection closed by peer|Connection reset by peer|"
                       r"Read error|Write error)(?: \[(?P<peer>[^\]]+)\])?")
# c10d's TCPStore seen from a client rank. ProcessGroupNCCL's broadcastUniqueNCCLID: "[R] is setting up NCCL
# communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key 'K', but store->get('K') got
# error: E. This may indicate a possible application crash on rank 0 or a network set up issue."
# (torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp); E and the store's own errors are libtorch_cpu's format
# strings (torch 2.13, TCPStore.cpp / socket.cpp): "Failed to recv, got 0 bytes. Connection was likely closed. Did
# the remote server shutdown or crash?", "recvValue failed on {}: {}", "sendBytes failed on {}: {}", "wait timeout
# after {}ms, keys: {}", "Socket Timeout", "The client socket has timed out after {} while trying to connect to
# ({}, {}).", "TCP client failed to connect/validate to host {}:{} - timed out ..."; the errno texts ("Connection
# reset by peer", "Broken pipe") from strerror
STORE_GET = re.compile(r"\[(?P<rank>\d+)\] is setting up NCCL communicator and retrieving ncclUniqueId from \[0\]")
STORE_GONE = re.compile(r"Connection reset by peer|Connection closed by peer|Broken pipe|Failed to recv, got 0 bytes|"
                        r"Failed to send, sent 0 bytes|recvValue failed on|sendBytes failed on")
STORE_TIMEOUT = re.compile(r"Socket Timeout|wait timeout after (?P<ms>\d+) ?ms")
STORE_CONNECT = re.compile(r"client socket has timed out after (?P<t>\S+) while trying to connect to \((?P<host>[^,()]+), "
                           r"(?P<port>\d+)\)|client socket has failed to connect to|TCP client failed to "
                           r"connect/validate to host (?P<h2>[^:\s]+):(?P<p2>\d+)")
_STORE_CLS = ("DistStoreError", "DistNetworkError", "DistBackendError")
# ATen's MapAllocator (aten/src/ATen/MapAllocator.cpp; the strings in torch 2.13's libtorch_cpu): "unable to write to
# file <NAME>: ERR (N)", "unable to mmap N bytes from file <NAME>: ERR (N)", "unable to open shared memory object
# <NAME> in read-write mode: ERR (N)", "unable to allocate shared memory(shm) for file <NAME>"; NAME "/torch_PID_..."
# is the segment a DataLoader worker passes a batch through (torch.multiprocessing's sharing strategies)
SHM_MAP = re.compile(r"unable to (?:write to file|mmap \d+ bytes from file|open shared memory object|resize file|"
                     r"allocate shared memory\(shm\) for file) <(?P<name>/?torch_[^>]*)>(?:[^:]*: (?P<err>[^(]+?)"
                     r" \((?P<errno>\d+)\))?")
# torch/cuda/__init__.py:522 (torch 2.13) `_lazy_init`: a build of torch without CUDA asked for a GPU
NO_CUDA_BUILD = re.compile(r"Torch not compiled with CUDA enabled")
# transformers' TrainingArguments.__post_init__ (training_args.py, 5.6.0: "Your setup doesn't support bf16/gpu.
# You need to assign use_cpu ..."; 4.x: "... You need torch>=1.10, using Ampere GPU with cuda>=11.0")
BF16_SETUP = re.compile(r"Your setup doesn't support bf16/gpu")


def launch_cause(cls: str, msg: str, words: str = "") -> str | None:
    """The launch or sizing mistake the exception `cls`: `msg` states, in words, or None; `words` the report's
    other text (FSDP turned on by accelerate's default config, a dtype mismatch of a plain `python` launch over
    several GPUs: kindwords.py `layer_cause`)."""
    m = ADDR_IN_USE.search(msg.strip())
    if m:
        port = f" {m.group('port')}" if m.group("port") else ""
        return (f"the master's rendezvous port{port} is already taken on this node: an earlier run that did not "
                "exit (a zombie torchrun or its children) or another job on the node; end it (`ss -ltnp`, "
                "`nvidia-smi` for its processes) or give this run another port (MASTER_PORT, --master_port)")
    if "No CUDA GPUs are available" in msg:
        return ("the process sees no GPU: CUDA_VISIBLE_DEVICES empty or naming cards that do not exist, a "
                "container started without GPUs (--gpus all / the device plugin), or a scheduler job without a GPU "
                "request; check nvidia-smi and CUDA_VISIBLE_DEVICES inside the job")
    m = GLOO_PEER.search(msg)
    if m:
        peer = f" ({m.group('peer')})" if m.group("peer") else ""
        return (f"the other end of a gloo connection{peer} went away: a consequence, not the cause; the process on "
                "that peer died or the link dropped, and the first failure is in that peer's own log")
    said = store_cause(cls, msg)
    if said:
        return said
    m = SHM_MAP.search(msg)
    if m:
        err = m.group("err") or ""
        why = ("/dev/shm is full, not the disk" if "No space" in err else "the process ran out of file descriptors for the segments "
               "(the file_descriptor sharing strategy holds one per tensor)" if m.group("errno") == "24"
               else "/dev/shm is too small or full")
        return (f"a DataLoader worker could not pass a batch through shared memory ({m.group('name')}: {err or 'refused'})"
                f": {why}; give the container a larger /dev/shm (docker --shm-size=16g or --ipc=host), "
                "use fewer DataLoader workers (dataloader_num_workers) or 0 to load in the main process"
                + (", or raise `ulimit -n` / torch.multiprocessing.set_sharing_strategy('file_system')"
                   if m.group("errno") == "24" else ""))
    if NO_CUDA_BUILD.search(msg):
        return ("the installed torch is a CPU-only build (pip's default on some platforms, or a CPU wheel pulled in "
                "by another package): install the CUDA build for the driver (the index URL pytorch.org gives for "
                "that CUDA) and check torch.version.cuda")
    if BF16_SETUP.search(msg):
        return ("bf16 was asked for on a setup without it: bf16 needs an NVIDIA GPU of compute capability 8.0 or "
                "newer (A100, RTX 30xx/40xx, H100; not V100, T4 or RTX 20xx) with a CUDA build of torch; set bf16: "
                "false and fp16: true on older cards")
    m = (NO_ENGINE_ATTR.search(msg) or NO_ENGINE_TYPED.search(msg)) if cls == "AttributeError" else None
    if m and m.group("obj") != "DeepSpeedEngine":
        return (f"the model ({m.group('obj')}) was asked for the DeepSpeedEngine method {m.group('attr')}, so it was "
                "never wrapped by deepspeed.initialize: a DeepSpeed config run without a distributed launcher (a "
                "single-GPU `llamafactory-cli train` with `deepspeed:` set starts no torchrun); launch it with "
                "FORCE_TORCHRUN=1 llamafactory-cli train ... (or torchrun / deepspeed), or drop the deepspeed key on "
                "one GPU")
    if FORCE_TORCHRUN.search(msg):
        return ("LLaMA-Factory refused a DeepSpeed config in a process that no distributed launcher started "
                "(`llamafactory-cli train` starts torchrun by itself only when more than one GPU is visible): "
                "launch it with FORCE_TORCHRUN=1 llamafactory-cli train ..., or drop the deepspeed key on one GPU")
    if WEIGHT_NOT_2D.search(msg):
        return ("the embedding met a weight that is not a matrix: ZeRO-3 leaves each partitioned parameter as an "
                "empty 1-D placeholder until the DeepSpeed engine gathers it (FSDP flattens and shards it into 1-D), "
                "so the forward ran through a model no engine wraps: most often a ZeRO-3 config in a process no "
                "distributed launcher started (a single-GPU `llamafactory-cli train` with `deepspeed:` starts no "
                "torchrun, yet the weights are partitioned at load), else a forward of the unwrapped model (a "
                "generation, a reference, reward or teacher model, a callback); launch it with FORCE_TORCHRUN=1 "
                "llamafactory-cli train ... (or torchrun / deepspeed), or drop the ZeRO-3 config on one GPU")
    m = CLIENTS_JOINED.search(msg)
    if m:
        missing = int(m.group("want")) - int(m.group("got"))
        return (f"only {m.group('got')} of the {m.group('want')} processes reached the rendezvous store on the "
                f"master within {m.group('sec')} s ({missing} never connected): those ranks never started or could "
                "not reach MASTER_ADDR:MASTER_PORT (a node not launched, --nnodes / --nproc_per_node or the world "
                "size not matching what was started, a firewall or the wrong network interface); start every node "
                "with the same master address and port, and read the missing nodes' own logs")
    m = VLLM_KV.search(msg)
    if m:
        n = VLLM_MAXLEN.search(msg)
        need = (f" a sequence of max_model_len {n.group('len')} needs more KV cache than the {m.group('kv')} tokens "
                "that fit;" if n and m.group("kv") else "")
        return ("vLLM's engine had no room left for its KV cache within gpu_memory_utilization of the card after "
                f"its weights and profiling run:{need} raise gpu_memory_utilization (LLaMA-Factory vllm_gpu_util, TRL "
                "vllm_gpu_memory_utilization, verl/OpenRLHF rollout gpu_memory_utilization), lower max_model_len "
                "(LLaMA-Factory vllm_maxlen), or free the card: in colocated RL the training process holds part of it")
    return layer_cause(cls, msg, words)


def store_cause(cls: str, msg: str) -> str | None:
    """What a c10d store error on a client rank establishes (`STORE_GET`, `STORE_GONE`, `STORE_TIMEOUT`,
    `STORE_CONNECT`), in words, or None. The store's server runs in rank 0's process (torchrun's agent on the
    first node holds it instead where TORCHELASTIC_USE_AGENT_STORE is set, libtorch_cpu's "The server socket on {}
    has failed to bind. TORCHELASTIC_USE_AGENT_STORE is enabled"), so a connection to it that was reset or closed
    means rank 0 (or that node) had gone: the error is a consequence and rank 0's output holds the cause
    (ranks.py CONSEQUENCE_EXC/WORDS rank another rank's exception above it)."""
    get = STORE_GET.search(msg)
    if not (get or cls in _STORE_CLS or "TCPStore" in msg or "c10d" in msg):
        return None   # "Connection reset by peer" alone may be a download or any socket
    who = f"rank {get.group('rank')}" if get else "this rank"
    what = " while it fetched NCCL's unique id from rank 0" if get else ""
    m = STORE_CONNECT.search(msg)
    if m and "(errno: 97 " not in msg:   # IPv6 localhost first, then IPv4: printed by runs that train (rendezvous.py)
        at = (f" at {m.group('host') or m.group('h2')}:{m.group('port') or m.group('p2')}"
              if m.group("host") or m.group("h2") else "")
        return (f"{who} never reached the c10d store{at} (the rendezvous store on the master node): the master "
                "was not started or had already exited, MASTER_ADDR/MASTER_PORT differ between the nodes, or a "
                "firewall or the wrong network interface is between them; start the master node with the same "
                "address and port on every node, and read the master's own log")
    if STORE_GONE.search(msg):
        return (f"the c10d store lives in rank 0's process (or torchrun's agent on the first node), and {who}'s "
                f"connection to it was reset or closed{what}: rank 0 had already exited, so this error is a "
                "consequence, not the cause; rank 0's own output (an exception, a CUDA OOM, a kill) holds the "
                "cause: give it with --log")
    m = STORE_TIMEOUT.search(msg)
    if m:
        after = f" after {int(m.group('ms')) // 1000} s" if m.group("ms") else ""
        return (f"{who} waited on the c10d store{what} and the wait timed out{after}: rank 0 had not got there "
                "(still loading the model, or preparing the dataset on the main process while the other ranks "
                "wait), had died without closing its socket, or cannot be reached from this node; rank 0's log "
                "says which, and a preparation that is only slow needs a longer timeout (ddp_timeout, or "
                "init_process_group's timeout)")
    return None


def precision_cause(msg: str) -> str | None:
    """What "Attempting to unscale FP16 gradients." establishes, in words, or None for other messages."""
    if "Attempting to unscale FP16 gradients" not in msg:
        return None
    return ("torch's GradScaler (fp16 mixed precision) found gradients in fp16, so the trainable parameters were "
            "fp16 instead of fp32: a model loaded in float16 whose trainable parameters were not upcast; LLaMA-Factory "
            "upcasts them (unless pure_bf16), a script of its own may not, and peft upcasts adapter weights only "
            "where autocast_adapter_dtype applies (releases without it may create them in the base weights' dtype, "
            "so the peft release the project was written for matters); upcast the trainable parameters to fp32, "
            "pin the peft the project names, or train in bf16")
