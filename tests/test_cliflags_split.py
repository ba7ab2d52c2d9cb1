"""A command line's words are shlex's (issue #22 split a plain line without shlex): the same words either way."""

import random
import shlex

from finetune_doctor.readers.config import cliflags


def test_a_plain_line_splits_as_shlex_splits_it():
    rng = random.Random(20261207)
    alpha = "ab-_=./:,;!?@%^&*()[]{}<>|~+$` \t\r\n\x0b\x0c\x1c\x85\u00a0\u3000\u2028x1"
    for _ in range(5000):
        s = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 30)))
        assert cliflags._SHELL_SPECIAL.search(s) is None
        assert [w for w in cliflags._SHELL_SPACE.split(s) if w] == shlex.split(s, comments=True), repr(s)


def test_command_lines_with_and_without_shell_quoting_read_the_same_words():
    text = ("llamafactory-cli train \\\n  --stage sft --model_name_or_path Qwen/Qwen3-4B\u3000x \\\n"
            "  --template 'qwen3' --output_dir \"saves/a b\" # a comment\n")
    got = cliflags._logical_lines(text)
    assert got == [([1, 1, 2, 2, 2, 2, 3, 3, 3, 3],
                    ["llamafactory-cli", "train", "--stage", "sft", "--model_name_or_path", "Qwen/Qwen3-4B\u3000x",
                     "--template", "qwen3", "--output_dir", "saves/a b"])]
    assert cliflags.looks_like_command(text) is True
    assert cliflags.looks_like_command("# llamafactory-cli train x.yaml\nstage: sft\n") is False
