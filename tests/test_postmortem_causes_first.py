"""A raised exception is the cause and the failures that follow it are its consequences, whatever the ranking
of their rules or the clocks (issue #25: a loud consequence outranking a cause, the kind every held-out round of
the real threads showed): the NCCL watchdog's timeout of the ranks still waiting, torchrun's teardown and
ChildFailedError summary, accelerate's CalledProcessError. Beside it, general readings of the same rounds' other
kinds: a traceback's last line is its exception whatever the class is called; Windows' host-memory refusals; the
last warning above a traceback cut before its exception; a KeyError in the data path. Fixtures:
fixtures/postmortem/causes_first/ (FIXTURE.md names the upstream format of every line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pmhelp import diagnose, diagnose_dir, diagnose_report

FIX = "causes_first"


def _names(found):
    return [f.name for f in found]


def test_an_exception_before_a_watchdog_timeout_is_the_cause(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/raised_then_watchdog.log")
    assert _names(found)[:2] == ["run-crashed", "nccl-timeout"], _names(found)
    msg = found[0].message
    assert "ValueError: Unable to create tensor" in msg
    assert "then the NCCL collective timeout on rank 0 (ALLREDUCE): consequences of rank 2's exception" in msg
    # the timeout's own finding still names the rank it waited on
    assert "rank 2 failed first (ValueError)" in found[1].message


def test_torchruns_summary_does_not_hide_the_exception_above_it(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/raised_then_torchrun.log")[0]
    assert f.name == "run-crashed"
    assert f.message.startswith("The run ended at an unknown step with KeyError: 'videos'")
    assert "only in rank 0's own stderr" not in f.message   # the child's error is in this log
    assert "then torchrun's failure lines: consequences of this exception" in f.message


def test_a_launchers_called_process_error_is_a_consequence(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/raised_then_accelerate.log")[0]
    assert f.name == "run-crashed"
    assert "with ValueError: Target modules {'c_attn'} not found in the base model." in f.message
    assert "then the CalledProcessError that follows: consequences of this exception" in f.message


def test_a_consequence_alone_keeps_its_own_finding(tmp_path):
    r = diagnose_report(tmp_path, f"{FIX}/consequence_alone.log")
    assert _names(r.findings)[0] == "nccl-timeout"
    assert "run-crashed" not in _names(r.findings)


def _rank_folder(root: Path, ranks: int, raiser: int, watchdog_clock: str) -> Path:
    """`ranks` rank logs: `raiser` raised a ValueError (its line has no clock), the others timed out in the
    same ALLREDUCE with the watchdog's glog clock `watchdog_clock` (ProcessGroupNCCL.cpp checkTimeout's format)."""
    d = root / "logs"
    d.mkdir()
    for r in range(ranks):
        if r == raiser:
            text = (f"[rank{r}]: Traceback (most recent call last):\n"
                    f'[rank{r}]:   File "/ws/LLaMA-Factory/src/llamafactory/data/collator.py", line 168, in __call__\n'
                    f"[rank{r}]:     features = super().__call__(features)\n"
                    f"[rank{r}]: ValueError: expected sequence of length 512 at dim 1 (got 498)\n")
        else:
            text = (f"[rank{r}]:[E302 {watchdog_clock}.218841907 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught "
                    "collective operation timeout: WorkNCCL(SeqNum=1402, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                    "Timeout(ms)=1800000) ran for 1800096 milliseconds before timing out.\n")
        (d / f"rank{r}.log").write_text(text)
    return d


@pytest.mark.parametrize("ranks, raiser, clock", [(256, 173, "00:00:01"), (16, 11, "23:59:59")])
def test_the_rank_that_raised_is_named_first_whatever_the_clocks(tmp_path, ranks, raiser, clock):
    r = diagnose_dir(_rank_folder(tmp_path, ranks, raiser, clock))
    names = _names(r.findings)
    assert names[0] == "run-crashed" and names.index("nccl-timeout") > 0, names
    assert "ValueError: expected sequence of length 512" in r.findings[0].message
    assert f"consequences of rank {raiser}'s exception" in r.findings[0].message


@pytest.mark.parametrize("name, head", [
    ("any_class_zipfile.log", "with zipfile.BadZipFile: File is not a zip file — raised in"),
    ("any_class_triton.log", "with triton.runtime.errors.OutOfResources: out of resource: shared memory, "
                             "Required: 196608, Hardware limit: 101376."),
    ("any_class_stopiteration.log", "with StopIteration — raised in _next_data (dataloader.py, torch)"),
])
def test_a_tracebacks_last_line_is_its_exception_whatever_the_class(tmp_path, name, head):
    f = diagnose(tmp_path, f"{FIX}/{name}")[0]
    assert f.name == "run-crashed"
    assert head in f.message
    assert "cut before the exception line" not in f.message


def test_a_line_that_is_no_exception_leaves_the_traceback_cut(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/traceback_then_other.log")[0]
    assert f.name == "run-crashed"
    assert "a traceback whose exception line is not in the log" in f.message
    assert "Loading.Shards" not in f.message


@pytest.mark.parametrize("name, words", [
    ("windows_not_enough_memory.log", ["allocation of 0.98 GiB failed inside the process while loading the model",
                                       "DefaultCPUAllocator: not enough memory"]),
    ("windows_paging_file.log", ["Windows refused to commit more memory (OSError [WinError 1455]",
                                 "enlarge the paging file"]),
])
def test_windows_host_memory_refusals_are_host_alloc_failed(tmp_path, name, words):
    f = diagnose(tmp_path, f"{FIX}/{name}")[0]
    assert f.name == "host-alloc-failed", (f.name, f.message)
    for w in words:
        assert w in f.message, (w, f.message)


def test_a_cut_traceback_names_the_last_warning_above_it(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/cut_after_checkpoint_warning.log")[0]
    assert f.name == "run-crashed"
    assert ('the last warning the log printed before this traceback is UserWarning "None of the inputs have '
            'requires_grad=True. Gradients will be None" (checkpoint.py:87)') in f.message
    assert "Expected to mark a variable ready only once" in f.message and "use_reentrant_gc: false" in f.message
    assert "give the lines after this traceback" in f.message   # still a lead, not the error


def test_a_warning_is_no_lead_when_the_exception_is_there(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/warning_then_exception.log")[0]
    assert "Template qwen9 does not exist" in f.message
    assert "last warning" not in f.message


def test_a_key_missing_in_a_batch_is_the_datas_not_a_librarys(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/raised_then_torchrun.log")[0]
    assert "raised while a batch was built (__call__ (collator.py)): a sample or a batch lacks the key 'videos'" \
        in f.message
    assert "incompatibility of the installed" not in f.message
    own = diagnose(tmp_path / "own", f"{FIX}/keyerror_own_code.log")[0]
    assert own.message == ("The run ended at an unknown step with KeyError: 'qwen-72b' — raised in <module> "
                           "(prepare.py, not under site-packages).")


def test_an_exception_no_reading_explains_names_where_it_was_raised(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/any_class_zipfile.log")[0]
    assert f.message.endswith("zipfile.BadZipFile: File is not a zip file — raised in _RealGetContents "
                              "(__init__.py, not under site-packages), called from load (serialization.py, torch).")
    bare = diagnose(tmp_path / "bare", "crash_causes/../causes_first/missing_file_plain.log")[0]
    assert "raised in load_dataset (load.py, datasets)" in bare.message


def test_a_rename_whose_source_vanished_is_another_process_renaming_first(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/rename_race_staged_save.log")[0]
    assert f.name == "run-crashed"
    assert ("the folder to rename was already gone ('tmp-checkpoint-500' -> 'checkpoint-500'): another process "
            "renamed the same folder first") in f.message
    assert "transformers' staged checkpoint save" in f.message and "#28364" in f.message
    plain = diagnose(tmp_path / "plain", f"{FIX}/missing_file_plain.log")[0]
    assert "renamed" not in plain.message


def test_an_nccl_error_of_a_peer_that_went_away_follows_the_exception(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/raised_then_nccl_remote_error.log")
    assert _names(found)[:2] == ["run-crashed", "nccl-error"], _names(found)
    msg = found[0].message
    assert "FileNotFoundError: [Errno 2] No such file or directory: '/mnt/ds/llava/img_0458.png'" in msg
    assert ('then the NCCL error "remote process exited or there was a network error": consequences of rank 3'
            "'s exception") in msg


@pytest.mark.parametrize("name, words", [
    ("stop_then_worker_sigterm.log", ["Slurm job 9930172 on node-g08 was stopped by Slurm's time limit",
                                      "during step 1161 of 2000"]),
    ("keyboard_interrupt.log", ["the training process was stopped by SIGINT (Python raised KeyboardInterrupt",
                                "during step 42 of 500"]),
])
def test_an_exception_a_stop_from_outside_caused_is_not_the_cause(tmp_path, name, words):
    found = diagnose(tmp_path, f"{FIX}/{name}")
    assert found[0].name == "stopped-from-outside", _names(found)
    assert "run-crashed" not in _names(found)
    for w in words:
        assert w in found[0].message, (w, found[0].message)


def test_an_exception_before_a_stop_from_outside_stays_the_cause(tmp_path):
    found = diagnose(tmp_path, f"{FIX}/exception_then_stop.log")
    assert found[0].name == "run-crashed", _names(found)
    assert "PIL.UnidentifiedImageError: cannot identify image file" in found[0].message


def test_a_worker_that_exited_unexpectedly_died_of_a_signal(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/worker_exited.log")[0]
    assert f.name == "run-crashed"
    assert "a DataLoader worker process died without a Python error" in f.message
    assert "dataloader_num_workers: 0" in f.message


def test_an_attribute_an_object_lacks_names_the_library_that_used_it(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/object_attr_mismatch.log")[0]
    assert ("accelerate (in clip_grad_norm_ of accelerator.py) uses DeepSpeedEngine.get_global_grad_norm, which the "
            "installed DeepSpeedEngine does not have: accelerate and the package that defines DeepSpeedEngine come "
            "from releases that do not go together") in f.message
    assert "incompatibility of the installed transformers release" not in f.message


def test_a_hub_error_is_read_by_its_class(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/hub_gated.log")[0]
    assert f.name == "run-crashed"
    assert "huggingface_hub.errors.GatedRepoError: 401 Client Error." in f.message
    assert "the Hugging Face hub refused a gated repository: accept its terms" in f.message


def test_pdsh_host_labels_are_prefixes(tmp_path):
    from finetune_doctor.readers.runlogs.lineprefix import strip_prefixes

    text, pre = strip_prefixes("gpu-node-2: [rank3]: Traceback (most recent call last):")
    assert (text, pre.host, pre.rank) == ("Traceback (most recent call last):", "gpu-node-2", 3)
    for line in ("loss: 0.5", "INFO: starting", "wandb: Run summary:", "Epoch1: 3", "cuda:0: x"):
        assert strip_prefixes(line)[0] == line, line   # words, not host names
    found = diagnose(tmp_path, f"{FIX}/pdsh_multinode.log")
    assert _names(found)[:2] == ["run-crashed", "nccl-timeout"], _names(found)
    assert "FileNotFoundError: Unable to find '/mnt/LLaMA-Factory/data/sft_mix_v2.json'" in found[0].message
    assert "consequences of this exception" in found[0].message   # no rank named: the line gives none


@pytest.mark.parametrize("name, words", [
    ("bar_postfix_nan.log", ["Training went non-finite at step 30: loss nan at learning rate 1.5e-06",
                             "after 2 healthy log(s)"]),
    ("bar_description_loss.log", ["Training went non-finite at step 30: loss nan", "after 2 healthy log(s)"]),
])
def test_losses_a_bar_shows_are_read_at_the_bars_count(tmp_path, name, words):
    f = diagnose(tmp_path, f"{FIX}/{name}")[0]
    assert f.name == "nan-loss", (f.name, f.message)
    for w in words:
        assert w in f.message, (w, f.message)


def test_a_signed_policy_loss_in_a_postfix_is_no_loss_curve(tmp_path):
    r = diagnose_report(tmp_path, f"{FIX}/bar_postfix_policy.log")
    assert not any(f.name in ("nan-loss", "loss-spike", "loss-diverged") for f in r.findings), \
        [f.name for f in r.findings]


def test_a_short_paste_of_a_dotted_exception_is_a_crash(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/title_dotted_exception.log")[0]
    assert f.name == "run-crashed"
    assert "with triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456" in f.message
    prose = diagnose(tmp_path / "prose", f"{FIX}/prose_no_exception.log")[0]
    assert prose.name == "no-run-evidence"


def test_the_cuda_samples_check_macro_is_a_cuda_error(tmp_path):
    f = diagnose(tmp_path, f"{FIX}/cuda_check_return.log")[0]
    assert f.name == "cuda-error", (f.name, f.message)
    assert "an illegal memory access was encountered" in f.message
