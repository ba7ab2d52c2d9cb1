"""PYTORCH_CUDA_ALLOC_CONF / PYTORCH_ALLOC_CONF parsing (probes/allocconf.py) against torch's parser rules.

Reference: c10/core/AllocatorConfig.h ``ConfigTokenizer`` and c10/core/AllocatorConfig.cpp
``AcceleratorAllocatorConfig::parseArgs`` and its ``parse*`` helpers (torch 2.9+), c10/cuda/CUDAAllocatorConfig.cpp
(2.3-2.8); the environment precedence of ``AcceleratorAllocatorConfig::instance`` (``PYTORCH_ALLOC_CONF`` before
the deprecated ``PYTORCH_CUDA_ALLOC_CONF``).
"""

from __future__ import annotations

import pytest

from finetune_doctor.errors import InputError
from finetune_doctor.probes.allocconf import (
    AllocatorConfig, alloc_conf_from_env, find_alloc_conf, parse_alloc_conf, tokenize,
)

MIB = 1 << 20


def test_defaults_are_torchs():
    c = parse_alloc_conf("")
    assert (c.max_split_size, c.max_non_split_rounding, c.garbage_collection_threshold, c.expandable_segments) == (
        None, 20 * MIB, 0.0, False)
    assert c.roundup_power2_divisions == (0,) * 16
    assert AllocatorConfig() == parse_alloc_conf("", variable=None)


def test_tokenizer_splits_on_separators_and_drops_whitespace():
    assert tokenize(" a : 1 , b:[2,3] ") == ["a", ":", "1", ",", "b", ":", "[", "2", ",", "3", "]"]


def test_options_parse_to_bytes_and_flags():
    c = parse_alloc_conf("max_split_size_mb:128, garbage_collection_threshold:0.6,expandable_segments:True")
    assert c.max_split_size == 128 * MIB and c.garbage_collection_threshold == 0.6 and c.expandable_segments
    assert parse_alloc_conf("max_non_split_rounding_mb:64").max_non_split_rounding == 64 * MIB
    assert parse_alloc_conf("roundup_power2_divisions:4").roundup_power2_divisions == (4,) * 16
    assert parse_alloc_conf("backend:native,release_lock_on_cudamalloc:True").release_lock_on_cudamalloc


def test_roundup_list_form_and_the_version_difference_of_the_catch_all():
    # [256:8,512:2,>:1]: index log2(MiB); the first entry also fills the intervals below it
    new = parse_alloc_conf("roundup_power2_divisions:[256:8,512:2,>:1]", torch_version="2.11").roundup_power2_divisions
    assert new[:8] == (8,) * 8 and new[8] == 8 and new[9] == 2 and new[10:] == (1,) * 6
    # 2.3-2.8 fill '>' from the last named interval on, overwriting it (std::next(begin, last_index))
    old = parse_alloc_conf("roundup_power2_divisions:[256:8,512:2,>:1]", torch_version="2.5").roundup_power2_divisions
    assert old[9] == 1 and old[8] == 8
    c = parse_alloc_conf("roundup_power2_divisions:[256:8,512:2,>:1]")
    assert c.divisions_for(300 * MIB) == 8 and c.divisions_for(600 * MIB) == 2 and c.divisions_for(5 << 30) == 1


@pytest.mark.parametrize("text, words", [
    ("expandable_segments:true", "True/False"),          # toBool accepts exactly True / False
    ("max_split_size_mb:10", "must be >= 20"),            # min_allowed_split_size_mb = kLargeBuffer / kMB
    ("garbage_collection_threshold:1.0", "(0.0, 1.0)"),
    ("roundup_power2_divisions:3", "power of 2"),
    ("roundup_power2_divisions:[100:4]", "power of 2"),
    ("no_such_option:1", "unrecognized"),
    ("expandable_segments", "':'"),
    ("expandable_segments:True;max_split_size_mb:64", "True/False"),
    ("max_split_size_mb:abc", "whole number"),
])
def test_bad_values_raise_input_error_naming_the_variable(text, words):
    with pytest.raises(InputError) as err:
        parse_alloc_conf(text, variable="PYTORCH_ALLOC_CONF")
    assert "PYTORCH_ALLOC_CONF" in str(err.value) and words in str(err.value)


def test_max_non_split_rounding_is_unknown_before_2_5():
    with pytest.raises(InputError):
        parse_alloc_conf("max_non_split_rounding_mb:40", torch_version="2.4.1")


def test_environment_precedence_follows_the_torch_version():
    env = {"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}
    assert find_alloc_conf(env, "2.9.0") == ("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    assert alloc_conf_from_env(env).expandable_segments
    assert not alloc_conf_from_env(env, torch_version="2.7.1").expandable_segments   # legacy variable only
    assert alloc_conf_from_env({}) == AllocatorConfig()
    assert alloc_conf_from_env({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}).max_split_size == 512 * MIB
    with pytest.raises(InputError, match="PYTORCH_CUDA_ALLOC_CONF"):
        alloc_conf_from_env({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:yes"})
