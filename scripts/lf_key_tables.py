"""Hand-written tables of scripts/gen_key_schema.py: the retired keys (``retired`` of
finetune_doctor/catalog/lf_keys.json) and the value ranges of the keys used in arithmetic (``range``,
``null_fails``). Each entry cites its source."""

# Keys LF rejects today and what replaced them. `replacement` is the key that now does the same job; `same_value`
# says whether the old value can be moved to the new key unchanged (a safe rename); `scale` describes a value
# conversion when it cannot. Versions are LLaMA-Factory git tags (LF_FACTS.md §1a: hparams fields diffed across tags
# v0.5.0...v0.9.5 against HEAD ff6d4d1).
RETIRED = {
    "dpo_beta": {"replacement": "pref_beta", "same_value": True, "last_seen": "v0.7",
                 "explanation": "The DPO options were renamed pref_* when ORPO/SimPO joined DPO."},
    "dpo_ftx": {"replacement": "pref_ftx", "same_value": True, "last_seen": "v0.7",
                "explanation": "The DPO options were renamed pref_* when ORPO/SimPO joined DPO."},
    "dpo_loss": {"replacement": "pref_loss", "same_value": True, "last_seen": "v0.7",
                 "explanation": "The DPO options were renamed pref_*; pref_loss also takes orpo and simpo."},
    "orpo_beta": {"replacement": "pref_beta", "same_value": True, "last_seen": "v0.7",
                  "explanation": "ORPO now reads pref_beta (with pref_loss: orpo)."},
    "num_layer_trainable": {"replacement": "freeze_trainable_layers", "same_value": True, "last_seen": "v0.7",
                            "explanation": "Freeze tuning options were renamed freeze_*."},
    "name_module_trainable": {"replacement": "freeze_trainable_modules", "same_value": True, "last_seen": "v0.7",
                              "explanation": "Freeze tuning options were renamed freeze_*."},
    "sft_packing": {"replacement": "packing", "same_value": True, "last_seen": "v0.5",
                    "explanation": "Packing is no longer SFT-only; the key is packing."},
    "cache_path": {"replacement": "tokenized_path", "same_value": True, "last_seen": "v0.6",
                   "explanation": "The tokenized dataset cache is now tokenized_path."},
    "new_special_tokens": {"replacement": "add_special_tokens", "same_value": True, "last_seen": "v0.9.2",
                           "explanation": "Special tokens to add to the tokenizer are now add_special_tokens "
                                          "(comma-separated string)."},
    # 0.9.0's model_args.py: "Keeps the height or width of image below this resolution" (default 512); 0.9.1's:
    # "Keeps the number of pixels of image below this resolution" (default 512 * 512), from the wheels
    "image_resolution": {"replacement": "image_max_pixels", "same_value": False, "scale": "square",
                         "side_length_in": ["0.9.0"], "last_seen": "v0.9.1",
                         "explanation": "image_resolution was the longest side in pixels in 0.9.0 and a pixel count "
                                        "in 0.9.1; image_max_pixels is a pixel count (default 768*768 = 589824)."},
    "video_resolution": {"replacement": "video_max_pixels", "same_value": False, "scale": "square",
                         "side_length_in": ["0.9.0"], "last_seen": "v0.9.1",
                         "explanation": "video_resolution was the longest side in pixels in 0.9.0 and a pixel count "
                                        "in 0.9.1; video_max_pixels is a pixel count (default 256*256 = 65536)."},
    "image_dir": {"replacement": "media_dir", "same_value": True, "last_seen": "v0.9.1",
                  "explanation": "Images, videos and audio share one folder option, media_dir."},
    "vllm_dtype": {"replacement": "infer_dtype", "same_value": True, "last_seen": "v0.9",
                   "explanation": "The inference dtype option is shared by all inference engines as infer_dtype."},
    "use_cache": {"replacement": "use_kv_cache", "same_value": True, "last_seen": "v0.9.3",
                  "explanation": "LLaMA-Factory's own use_cache became use_kv_cache. transformers 5 added an "
                                 "unrelated training option named use_cache.",
                  "transformers_key_in": ["5"]},
    "evaluation_strategy": {"replacement": "eval_strategy", "same_value": True, "last_seen": "transformers 4.45",
                            "explanation": "transformers renamed evaluation_strategy to eval_strategy; neither "
                                           "4.57 nor 5.8 accepts the old name."},
    "badam_switch_block_every": {"replacement": "badam_switch_interval", "same_value": True, "last_seen": "v0.6",
                                 "explanation": "BAdam's block switch period is badam_switch_interval."},
    "fp32": {"replacement": None, "last_seen": None,
             "explanation": "There is no fp32 key. Full fp32 training means leaving bf16, fp16 and pure_bf16 unset "
                            "(LF then trains in fp32 for full/freeze tuning); the WebUI's 'fp32' compute type maps "
                            "to exactly that."},
    "torch_dtype": {"replacement": None, "last_seen": None,
                    "explanation": "LLaMA-Factory always loads weights in the checkpoint's dtype (torch_dtype='auto', "
                                   "model/loader.py). Compute precision comes from bf16/fp16/pure_bf16 in training "
                                   "and from infer_dtype for chat/export."},
    "split": {"replacement": None, "last_seen": "v0.8",
              "explanation": "The dataset split is set per dataset in dataset_info.json (\"split\": \"train\").",
              # an eval config's split moved into the task name (eval/evaluator.py splits `task` at "_";
              # examples/train_lora/llama3_lora_eval.yaml; LlamaFactory#5843): facts/lint.py picks it by config kind
              "explanation_by_kind": {
                  "eval": "In an eval config the split is part of the task name (`task: mmlu_test` for MMLU's test "
                          "split: the evaluator splits `task` at its underscore, as LLaMA-Factory's "
                          "llama3_lora_eval.yaml example writes it); delete `split` only together with that, since "
                          "a task with no split stops the evaluator."}},
    "reserved_label_len": {"replacement": None, "last_seen": "v0.8",
                           "explanation": "Removed; cutoff_len alone bounds source plus target."},
    "visual_inputs": {"replacement": None, "last_seen": "v0.8",
                      "explanation": "Removed; multimodal models are recognised from the model and template."},
    "train_mm_proj_only": {"replacement": None, "last_seen": "v0.9.1",
                           "explanation": "Replaced by freeze_vision_tower, freeze_multi_modal_projector and "
                                          "freeze_language_model."},
    "ppo_logger": {"replacement": None, "last_seen": "v0.9",
                   "explanation": "Removed; PPO logs through report_to like the other stages."},
    "lora_bf16_mode": {"replacement": None, "last_seen": "v0.9",
                       "explanation": "Removed; trainable parameters stay in half precision only with pure_bf16 "
                                      "(otherwise LF upcasts them to fp32, model/adapter.py)."},
    "ray_run_name": {"replacement": None, "last_seen": "v0.9.4", "explanation": "Ray option removed in v0.9.5."},
    "ray_storage_path": {"replacement": None, "last_seen": "v0.9.4", "explanation": "Ray option removed in v0.9.5."},
    "ray_storage_filesystem": {"replacement": None, "last_seen": "v0.9.4",
                               "explanation": "Ray option removed in v0.9.5."},
    "resources_per_worker": {"replacement": None, "last_seen": "v0.9.4",
                             "explanation": "Ray option removed in v0.9.5."},
    "placement_strategy": {"replacement": None, "last_seen": "v0.9.4",
                           "explanation": "Ray option removed in v0.9.5."},
    "kt_mode": {"replacement": None, "last_seen": "v0.9.4", "explanation": "KTransformers option removed."},
    "kt_maxlen": {"replacement": None, "last_seen": "v0.9.4", "explanation": "KTransformers option removed."},
    "kt_use_cuda_graph": {"replacement": None, "last_seen": "v0.9.4",
                          "explanation": "KTransformers option removed."},
    "kt_force_think": {"replacement": None, "last_seen": "v0.9.4", "explanation": "KTransformers option removed."},
    "kt_optimize_rule": {"replacement": None, "last_seen": "v0.9.4",
                         "explanation": "KTransformers option removed."},
    "cpu_infer": {"replacement": None, "last_seen": "v0.9.4", "explanation": "KTransformers option removed."},
    "chunk_size": {"replacement": None, "last_seen": "v0.9.4", "explanation": "KTransformers option removed."},
    "mode": {"replacement": None, "last_seen": "v0.9.4", "explanation": "KTransformers option removed."},
}


# Value ranges of the keys used in arithmetic, from what the code that reads them accepts. parse_dict checks none of
# them (transformers hf_argparser.py): a value out of range is taken and fails where it is first used, or silently
# makes no sense. `min`/`max` bound a number (`min_exclusive`: the bound itself is out); `values` lists the only
# numbers accepted; `fails` says where and how the run fails (the finding's message quotes it), with its source.
# A key whose value is null where the code does arithmetic on it has `null_fails`.
_DL = "torch 2.13 utils/data/dataloader.py and sampler.py BatchSampler"
RANGES = {
    "per_device_train_batch_size": {"min": 1, "fails": "the training DataLoader raises \"batch_size should be a "
                                    "positive integer value\" when the first batch is drawn", "source": _DL},
    "per_device_eval_batch_size": {"min": 1, "fails": "the evaluation DataLoader raises \"batch_size should be a "
                                   "positive integer value\" at the first evaluation", "source": _DL},
    "gradient_accumulation_steps": {"min": 1, "fails": "the Trainer divides the batches per epoch by it "
                                    "(ZeroDivisionError before the first step), and a negative count makes no sense",
                                    "source": "transformers 5.6.0 trainer.py set_initial_training_values"},
    "cutoff_len": {"min": 1, "fails": "every sample is truncated to nothing and LLaMA-Factory stops with \"Cannot find "
                   "valid samples\"", "source": "LF 0.9.5 data/processor/processor_utils.py infer_seqlen"},
    "num_train_epochs": {"min": 0, "min_exclusive": True,
                         "fails": "the Trainer plans zero or fewer optimizer steps and trains nothing",
                         "source": "transformers 5.6.0 trainer.py set_initial_training_values"},
    "max_steps": {"min": -1, "fails": "-1 means 'use num_train_epochs'; a value below it makes no sense",
                  "source": "transformers 5.6.0 training_args.py max_steps help"},
    "learning_rate": {"min": 0, "fails": "torch's AdamW raises \"Invalid learning rate\" when the optimizer is built",
                      "source": "torch 2.13 optim/adamw.py"},
    "weight_decay": {"min": 0, "fails": "torch's AdamW raises \"Invalid weight_decay value\" when the optimizer is "
                     "built", "source": "torch 2.13 optim/adamw.py"},
    "adam_beta1": {"min": 0, "max": 1, "max_exclusive": True, "fails": "torch's AdamW raises \"Invalid beta "
                   "parameter at index 0\" when the optimizer is built", "source": "torch 2.13 optim/adamw.py"},
    "adam_beta2": {"min": 0, "max": 1, "max_exclusive": True, "fails": "torch's AdamW raises \"Invalid beta "
                   "parameter at index 1\" when the optimizer is built", "source": "torch 2.13 optim/adamw.py"},
    "adam_epsilon": {"min": 0, "fails": "torch's AdamW raises \"Invalid epsilon value\" when the optimizer is built",
                     "source": "torch 2.13 optim/adamw.py"},
    "lora_rank": {"min": 1, "fails": "peft raises \"`r` should be a positive integer value\" when the adapter is "
                  "created", "source": "peft 0.18.1 tuners/lora/config.py LoraConfig.__post_init__"},
    "lora_dropout": {"min": 0, "max": 1, "fails": "torch raises \"dropout probability has to be between 0 and 1\" "
                     "when the adapter is created", "source": "torch 2.13 nn/modules/dropout.py"},
    "galore_rank": {"min": 1, "fails": "GaLore projects gradients to this rank; 0 or less makes no sense",
                    "source": "LF 0.9.5 train/trainer_utils.py _create_galore_optimizer"},
    "apollo_rank": {"min": 1, "fails": "APOLLO projects gradients to this rank; 0 or less makes no sense",
                    "source": "LF 0.9.5 train/trainer_utils.py _create_apollo_optimizer"},
    # 0 is judged with the strategy (launch.py, invalid-step-setting): transformers refuses it for "steps" only
    "logging_steps": {"min": 0, "fails": "a negative step count (or share of the run) never logs: the run "
                      "goes on without a loss line", "source": "transformers 5.6.0 trainer.py"},
    "save_steps": {"min": 0, "fails": "a negative step count (or share of the run) never saves a "
                   "checkpoint", "source": "transformers 5.6.0 trainer.py"},
    "eval_steps": {"min": 0, "fails": "a negative step count (or share of the run) never evaluates",
                   "source": "transformers 5.6.0 trainer.py"},
    "warmup_ratio": {"min": 0, "max": 1, "fails": "a share of the run: below 0 transformers stops at start-up, above 1 "
                     "the warm-up never ends", "source": "transformers 5.6.0 training_args.py _validate_args"},
    "val_size": {"min": 0, "fails": "a share (below 1) or a count of samples; a negative one makes no sense",
                 "source": "LF 0.9.5 data/data_utils.py split_dataset"},
    "max_samples": {"min": 1, "fails": "LLaMA-Factory keeps the first max_samples rows, so 0 or fewer leaves no "
                    "data and it stops with \"Cannot find valid samples\"", "source": "LF 0.9.5 data/loader.py _load_single_dataset"},
    "preprocessing_num_workers": {"min": 1, "fails": "datasets raises \"num_proc must be an integer > 0\" when the "
                                  "data is tokenized", "source": "datasets 4.0.0 arrow_dataset.py map"},
    "dataloader_num_workers": {"min": 0, "fails": "the DataLoader raises \"num_workers option should be non-negative\"",
                               "source": _DL},
    "seed": {"min": 0, "max": 4294967295, "fails": "transformers.set_seed (called by LLaMA-Factory while parsing) "
             "stops with \"Seed must be between 0 and 2**32 - 1\"", "source": "numpy random seed, LF 0.9.5 "
             "hparams/parser.py:529"},
    "data_seed": {"min": 0, "max": 4294967295, "fails": "the sampler's generator raises when seeded with a value "
                  "outside 0 .. 2**32 - 1", "source": "torch 2.13 Generator.manual_seed"},
    "ref_model_quantization_bit": {"values": [4, 8], "fails": "LLaMA-Factory asserts \"We only accept 4-bit or 8-bit "
                                   "quantization.\" while parsing", "source": "LF 0.9.5 hparams/finetuning_args.py:577"},
    "reward_model_quantization_bit": {"values": [4, 8], "fails": "LLaMA-Factory asserts \"We only accept 4-bit or "
                                      "8-bit quantization.\" while parsing",
                                      "source": "LF 0.9.5 hparams/finetuning_args.py:578"},
    "num_beams": {"min": 1, "fails": "generation raises for fewer than one beam", "source": "transformers 5.6.0 "
                  "generation/configuration_utils.py validate"},
    "max_new_tokens": {"min": 1, "fails": "generation raises for fewer than one new token",
                       "source": "transformers 5.6.0 generation/configuration_utils.py validate"},
    "image_max_pixels": {"min": 1, "fails": "images are resized to at most this many pixels; 0 or fewer makes no sense",
                         "source": "LF 0.9.5 data/mm_plugin.py _preprocess_image"},
}
NULL_FAILS = {
    name: "LLaMA-Factory adds up int(use_galore) + int(use_apollo) + use_badam while parsing (TypeError on null, "
          "LF 0.9.5 hparams/finetuning_args.py:598)"
    for name in ("use_galore", "use_apollo", "use_badam")
}
