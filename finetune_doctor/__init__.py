"""finetune-doctor: will a LLaMA-Factory run fit, why did it die, is its config sane.

Importing this package is cheap: it pulls in no torch, transformers or deepspeed (DESIGN.md, "the lint path
stays light"). Heavy imports happen inside the commands that need them.
"""

__version__ = "0.1.0"
