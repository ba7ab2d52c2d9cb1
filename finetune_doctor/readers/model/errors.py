"""Typed errors of model resolution, for the ``model-unresolved`` finding and ``estimate``'s exit 2."""

from __future__ import annotations

from finetune_doctor.errors import InputError


class ModelUnresolved(InputError):
    """The model's architecture could not be resolved.

    `model` is what the YAML names (``model_name_or_path``), `missing` what was not found or not readable (one
    phrase), `fix` the one command or flag that supplies it (``--model-config path/to/config.json`` or
    ``hf download ID config.json``). `file`/`line` point at the config.json at fault when there is
    one, else are None (the caller points at the YAML's ``model_name_or_path``). `key` names the config.json field
    at fault, if any.
    """

    def __init__(self, message: str, *, model: str = "", missing: str = "", fix: str = "",
                 file: str | None = None, line: int | None = None, key: str | None = None):
        super().__init__(message, file=file, line=line)
        self.model, self.missing, self.fix, self.key = model, missing, fix, key


class ModelConfigInvalid(ModelUnresolved):
    """A config.json was found but cannot be read as an architecture: not JSON, not an object, a required key
    missing, a value of the wrong type or out of range. `file`, `line` and `key` say where."""
