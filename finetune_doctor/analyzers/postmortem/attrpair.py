"""An attribute a trainer, accelerate or peft object lacks, read as a release pairing of two packages (issue #25,
trial 15).

"'GRPOTrainer' object has no attribute 'current_gradient_accumulation_steps'" with no traceback (a title, a
one-line paste) names a class and an attribute, nothing else. The class says which package defines it and which
package it is built on: TRL's trainers subclass transformers' ``Trainer``, LLaMA-Factory's ``Custom*Trainer``
subclass transformers' or TRL's, transformers' ``Trainer`` drives accelerate's ``Accelerator``, peft's models wrap
transformers' models. One of the pair reads an attribute the other defines only in some releases, or sets only at
some point of its loop — trl#3983: GRPOTrainer divides by ``self.current_gradient_accumulation_steps``, which
transformers' Trainer sets inside ``_inner_training_loop`` only (fixed on TRL's side by PR #4852,
https://github.com/huggingface/trl/issues/3983). So the finding names both packages and asks for both releases
(``pip show A B``) instead of restating the error; which of the two to move depends on the releases, which the one
line does not give.
"""

from __future__ import annotations

import re

# CPython's AttributeError text for an instance ("'X' object has no attribute 'y'", Objects/object.c), also as users
# retype it (quotes lost or backticks) or say it in Chinese ("X 没有属性 y")
OBJ_ATTR_ANY = re.compile(r"[\x27\x22`]?(?P<cls>[A-Z]\w*)[\x27\x22`]?\s*(?:object\s+has\s+no\s+attribute|对象?没有(?:属性|attribute))\s*"
                          r"[\x27\x22`]?(?P<attr>\w+)")

# TRL's trainer classes (trl/trainer/*_trainer.py): each subclasses transformers.Trainer
_TRL = re.compile(r"^(?:SFT|DPO|GRPO|PPO|PPOv2|KTO|ORPO|CPO|BCO|Reward|RLOO|OnlineDPO|XPO|NashMD|GKD|PRM|IterativeSFT|"
                  r"AlignProp|DDPO|Judge|Minillm|GOLD)Trainer$")
# LLaMA-Factory's trainer classes (src/llamafactory/train/*/trainer.py): transformers' or TRL's underneath
_LF = re.compile(r"^(?:Custom\w*Trainer|PairwiseTrainer)$")
# (class pattern, the package that defines it, the package it is built on or drives)
_PAIRS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (_TRL, "trl", "transformers"),
    (_LF, "llamafactory", "transformers"),
    (re.compile(r"^(?:Seq2Seq)?Trainer$"), "transformers", "accelerate"),
    (re.compile(r"^(?:Accelerator|Accelerated\w+|AcceleratorState|PartialState|GradientState)$"), "accelerate",
     "transformers"),
    (re.compile(r"^(?:Peft\w*|Lora\w*|Prefix\w*Model|\w*PeftModel\w*)$"), "peft", "transformers"),
)


def trainer_attr_pair(cls: str, msg: str, pkgs: tuple) -> str | None:
    """What an AttributeError on a trainer, accelerate or peft object establishes when no frame names the caller
    (`pkgs` empty: a title or a one-line paste): the two packages of the pair (`_PAIRS`) and the command that gives
    both releases. `cls` the exception class, `msg` its text ("'GRPOTrainer' object has no attribute 'x'").
    None for another exception (`cls` "" is words that quote the text without the class), another object (a
    model, a tensor, None), or with frames (crashcause `_mismatch` reads those with the frame's package)."""
    if cls not in ("AttributeError", "") or pkgs:   # "" : words quoting the text without its class
        return None
    o = OBJ_ATTR_ANY.search(msg)
    if o is None:
        return None
    obj, attr = o.group("cls"), o.group("attr")
    pair = next(((a, b) for pat, a, b in _PAIRS if pat.match(obj)), None)
    if pair is None:
        return None
    owner, base = pair
    return (f"{obj} is {owner}'s ({_BUILT[owner].format(base=base)}), and one of the two reads `{attr}`, which the "
            f"installed other defines only in some releases or sets only at some point of its loop: a release "
            f"pairing of {owner} and {base}, not the data or the config. `pip show {owner} {base}` gives both "
            f"releases; install the {base} release {owner}'s requirements pin for the installed {owner} (or the "
            f"{owner} release written for the installed {base}), and see {owner}'s issues for `{attr}`")


_BUILT = {"trl": "a subclass of {base}' Trainer", "llamafactory": "a subclass of {base}' or TRL's Trainer",
          "transformers": "its Trainer drives {base}' Accelerator", "accelerate": "{base}' Trainer drives it",
          "peft": "it wraps a {base} model"}
