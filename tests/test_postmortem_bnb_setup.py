"""bitsandbytes' CUDA set-up refusal read as the build mismatch it is (issue #25, a version clash in a paste):
bitsandbytes 0.39-0.41 (cuda_setup/main.py) raises "CUDA Setup failed despite GPU being available" when no
libbitsandbytes_cudaXYZ.so matches the CUDA runtime it found (analyzers/postmortem/crashcause.py `_environment`).
The paste is written for this test in those releases' shape; it is not a case of fixtures/postmortem/real_threads."""

from __future__ import annotations

from pmhelp import first_of_text

SETUP_FAILED = """\
[rank0]:   File "/home/u/miniconda3/envs/lf/lib/python3.10/site-packages/bitsandbytes/cextension.py", line 20, in <module>
[rank0]:     raise RuntimeError('''
[rank0]: RuntimeError:
[rank0]:         CUDA Setup failed despite GPU being available. Please run the following command to get more information:
[rank0]:         python -m bitsandbytes"""


def test_the_set_up_refusal_names_a_build_for_this_cuda(tmp_path):
    f = first_of_text(tmp_path, "RuntimeError: CUDA Setup failed despite GPU being available. Please run the "
                                "following command to get more information:")
    assert f.name == "run-crashed"
    assert "bitsandbytes loaded without its CUDA library" in f.message


def test_the_multi_line_form_of_0_41_is_read_too(tmp_path):
    f = first_of_text(tmp_path, SETUP_FAILED)
    assert "install a bitsandbytes build for this CUDA" in f.message


def test_an_exception_whose_message_starts_on_the_next_line_keeps_that_line(tmp_path):
    # CPython prints "Cls: " and the message's own first line feed for raise Cls('''\n  text''')
    # (Lib/traceback.py format_exception_only); the reader takes the first non-empty line below as the message
    from finetune_doctor.readers.runlogs.logs import read_text_log

    (tmp_path / "a.log").write_text(SETUP_FAILED + "\n", encoding="utf-8")
    exc = [n for n in read_text_log(str(tmp_path / "a.log")).notices if n.kind == "exception"]
    assert [(n.line, n.value["cls"], n.value["msg"][:45]) for n in exc] == [
        (3, "RuntimeError", "CUDA Setup failed despite GPU being available")]
