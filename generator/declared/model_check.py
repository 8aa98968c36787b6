"""Check, before any timing, that a model folder does the campaign's kind of work with weights it holds."""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

from iteralab.core.errors import UserError

# A tokenizer's vocabulary lives in one of these; tokenizer_config.json alone makes transformers build a tokenizer of
# its special tokens only, and every word becomes [UNK] (a run that "works" on nothing).
VOCABULARY_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                    "sentencepiece.bpe.model", "sentencepiece.model")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def check_tokenizer_files(model_dir: Path) -> None:
    """Refuse a model folder that holds no tokenizer vocabulary."""
    if not any((model_dir / name).is_file() for name in VOCABULARY_FILES):
        raise UserError(f"model folder {model_dir} has no tokenizer files (none of {', '.join(VOCABULARY_FILES)}): "
                        "transformers would build a tokenizer of special tokens only and read every word as unknown; "
                        "save the model's tokenizer beside it (tokenizer.save_pretrained(folder))")


def _names(mapping: str) -> set[str]:
    from transformers.models.auto import modeling_auto

    return set(getattr(modeling_auto, mapping).values())


def _refuse_foreign_architecture(model_dir: Path, saved_as: list[str], accepted: set[str], what: str, need: str) -> None:
    if not saved_as or set(saved_as) & accepted:
        return
    if set(saved_as) & _names("MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"):
        found = "a causal language model (it generates text)"
    elif set(saved_as) & _names("MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"):
        found = "a text classifier (it labels texts)"
    else:
        found = "a model without the head this kind of work needs"
    raise UserError(f"model folder {model_dir} was saved as {', '.join(saved_as)}: {found}, not {what}; this campaign "
                    f"needs {need}")


class _Kept(logging.Handler):
    """Keep what transformers says while loading, so the record holds it instead of the console losing it."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(_ANSI.sub("", record.getMessage()).strip())


def check_loads(model_dir: Path, config: dict, auto_class, accepted: set[str], what: str, need: str, *,
                untrained: bool = False, **options) -> tuple[dict, object]:
    """Load the model once with AUTO_CLASS and refuse it when its checkpoint lacks weights the task needs.

    ACCEPTED names the architectures that do the work (WHAT; NEED says what to point [model] path at instead). Return
    what the manifest records (the architecture loaded, the checkpoint's own, the loading information and every warning
    transformers gave while loading) and the loaded model. UNTRAINED accepts weights the checkpoint lacks (a model about
    to be trained: the caller checks they will be); OPTIONS go to from_pretrained.
    """
    check_tokenizer_files(model_dir)
    saved_as = [str(name) for name in config.get("architectures") or []]
    _refuse_foreign_architecture(model_dir, saved_as, accepted, what, need)
    import transformers

    transformers.utils.logging.disable_progress_bar()  # a bar per check would clutter the run's own progress
    logger = transformers.utils.logging.get_logger("transformers")
    kept, verbosity = _Kept(), transformers.logging.get_verbosity()
    logger.addHandler(kept)
    # What loading says goes to the record, not to the console: a fine-tuning's new head would print its load report.
    transformers.utils.logging.disable_default_handler()
    transformers.logging.set_verbosity_warning()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, info = auto_class.from_pretrained(model_dir, local_files_only=True, output_loading_info=True,
                                                     **options)
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        raise UserError(f"cannot load {what} from {model_dir}: {str(error).splitlines()[0]}") from None
    finally:
        logger.removeHandler(kept)
        transformers.utils.logging.enable_default_handler()
        transformers.logging.set_verbosity(verbosity)
    loading = {key: sorted(str(item) for item in info.get(key) or ()) for key in
               ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    missing = loading["missing_keys"] + loading["mismatched_keys"]
    if (missing and not untrained) or loading["error_msgs"]:
        shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
        raise UserError(f"model folder {model_dir}: the checkpoint lacks weights a {type(model).__name__} needs "
                        f"({shown or '; '.join(loading['error_msgs'])}): transformers would initialise them at random "
                        f"and every output would be noise; this campaign needs {need}: train it and save it whole "
                        "(model.save_pretrained(folder)), then point [model] path at that folder")
    return ({"architecture": type(model).__name__, "saved_architectures": saved_as, "loading": loading,
             "loading_warnings": [*kept.messages, *(str(warning.message) for warning in caught)]}, model)
