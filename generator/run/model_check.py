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


def _classifier_names() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

    return set(MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.values())


def _causal_names() -> set[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def _refuse_foreign_architecture(model_dir: Path, saved_as: list[str]) -> None:
    if not saved_as or set(saved_as) & _classifier_names():
        return
    if set(saved_as) & _causal_names():
        what = "a causal language model (it generates text)"
    else:
        what = "a model without a sequence classification head"
    raise UserError(f"model folder {model_dir} was saved as {', '.join(saved_as)}: {what}, not a text classifier; a "
                    "classification campaign needs a model fine-tuned for classification (for example saved as "
                    "...ForSequenceClassification with its id2label)")


class _Kept(logging.Handler):
    """Keep what transformers says while loading, so the record holds it instead of the console losing it."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(_ANSI.sub("", record.getMessage()).strip())


def check_classifier(model_dir: Path, config: dict) -> dict:
    """Load the classifier once and refuse it when its checkpoint lacks weights the task needs.

    Return what the manifest records: the architecture loaded, the checkpoint's own, the loading information and every
    warning transformers gave while loading.
    """
    check_tokenizer_files(model_dir)
    saved_as = [str(name) for name in config.get("architectures") or []]
    _refuse_foreign_architecture(model_dir, saved_as)
    import transformers
    from transformers import AutoModelForSequenceClassification

    transformers.utils.logging.disable_progress_bar()  # a bar per check would clutter the run's own progress
    logger = transformers.utils.logging.get_logger("transformers")
    kept, verbosity = _Kept(), transformers.logging.get_verbosity()
    logger.addHandler(kept)
    transformers.logging.set_verbosity_warning()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model, info = AutoModelForSequenceClassification.from_pretrained(
                model_dir, local_files_only=True, output_loading_info=True)
    except (OSError, ValueError, RuntimeError, KeyError) as error:
        raise UserError(f"cannot load the classifier from {model_dir}: {str(error).splitlines()[0]}") from None
    finally:
        logger.removeHandler(kept)
        transformers.logging.set_verbosity(verbosity)
    loading = {key: sorted(str(item) for item in info.get(key) or ()) for key in
               ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")}
    untrained = loading["missing_keys"] + loading["mismatched_keys"]
    if untrained or loading["error_msgs"]:
        shown = ", ".join(untrained[:6]) + (f" and {len(untrained) - 6} more" if len(untrained) > 6 else "")
        raise UserError(f"model folder {model_dir}: the checkpoint lacks weights a {type(model).__name__} needs "
                        f"({shown or '; '.join(loading['error_msgs'])}): transformers would initialise them at random "
                        "and every prediction would be noise; fine-tune the model for classification and save it "
                        "whole (model.save_pretrained(folder)), then point [model] path at that folder")
    return {"architecture": type(model).__name__, "saved_architectures": saved_as, "loading": loading,
            "loading_warnings": [*kept.messages, *(str(warning.message) for warning in caught)]}
