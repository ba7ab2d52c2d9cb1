"""Shared pieces of the fuzz suite (issue 17, "Done when"): running a command in-process under a time limit and
judging its outcome (`run`), Hypothesis strategies for structured inputs (`strategies`) and the generator of the
hostile corpus (`corpus`, also behind ``scripts/gen_hostile_corpus.py``)."""
