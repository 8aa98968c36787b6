"""The campaign's lengths against the model's positions: refused before any timing, recorded in the manifest (#61).

`iteralab size` reads the same limit (money.sizing.context_limit): n_positions or max_position_embeddings in config.json.
Past it a model with a table of positions fails (GPT-2's has no row for position 64 of 64), and one with rotary positions
(Llama) runs on contexts it was never trained for, without a word: so a campaign whose longest sequence does not fit is
refused at the dry run, naming its keys, the limit and the entries that would run past it.
"""

from __future__ import annotations

from collections.abc import Callable

from iteralab.core.errors import UserError
from iteralab.core.language import Text
from iteralab.machine.facts import model_config
from iteralab.money.sizing import context_limit

# Models whose position ids start after the padding token's (RoBERTa's family): they hold max_position_embeddings less
# pad_token_id + 1 tokens (514 - 2 = 512 for roberta-base).
PADDING_OFFSET = frozenset({"roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm",
                            "data2vec-text", "longformer", "ibert", "mpnet"})
NOT_STATED = Text("config.json states neither n_positions nor max_position_embeddings: the lengths were not checked "
                  "against the model")
SHOWN = 5  # the first ids a refusal names


def positions(config: dict) -> dict:
    """Return the longest sequence the model holds, and where it was read from; None with the reason where not stated."""
    limit = context_limit(config)
    if limit is None:
        return {"positions": None, "read_from": None, "reason": NOT_STATED}
    inner = config.get("text_config") if isinstance(config.get("text_config"), dict) and config["text_config"] else config
    key = "n_positions" if "n_positions" in inner else "max_position_embeddings"
    read_from = f"{key} = {limit} in config.json"
    pad = inner.get("pad_token_id")
    if inner.get("model_type") in PADDING_OFFSET and isinstance(pad, int) and not isinstance(pad, bool) and 0 <= pad < limit:
        read_from += f", less {pad + 1}: {inner['model_type']}'s position ids start after the padding token's ({pad})"
        limit -= pad + 1
    return {"positions": limit, "read_from": read_from, "reason": None}


def record(campaign, new_tokens: int = 0) -> dict:
    """Return the manifest's context: the model's positions beside the longest sequence the protocol lets through."""
    found = positions(model_config(campaign.model_path))
    max_length = campaign.protocol["max_length"]
    return {**found, "max_length": max_length, "max_new_tokens": new_tokens or None,
            "longest_sequence": max_length + new_tokens,
            "longest_sequence_as": Text("max_length plus max_new_tokens: the longest prompt the protocol lets through and "
                                        "every new token") if new_tokens else Text("max_length: the longest input the "
                                                                                   "protocol lets through")}


def refuse_beyond(campaign, counts: Callable[[], dict[str, int]], new_tokens: int = 0) -> None:
    """Refuse max_length (plus NEW_TOKENS, a generation's max_new_tokens) beyond the model's positions, before any timing:
    the keys, the limit and how many entries would run past it with the first ids (COUNTS: each entry's tokens, read
    only when refusing)."""
    found = positions(model_config(campaign.model_path))
    limit, max_length = found["positions"], campaign.protocol["max_length"]
    if limit is None or max_length + new_tokens <= limit:
        return
    counted = counts()
    over = [entry_id for entry_id, count in counted.items() if min(count, max_length) + new_tokens > limit]
    what = "prompts" if new_tokens else "entries"
    keys = (f"[protocol] max_length = {max_length} plus [generation] max_new_tokens = {new_tokens} makes "
            f"{max_length + new_tokens} tokens, beyond" if new_tokens else f"[protocol] max_length = {max_length} is beyond")
    entries = (f"{len(over)} of the corpus's {len(counted)} {what} would run past them (first: {', '.join(over[:SHOWN])})"
               if over else f"none of the corpus's {len(counted)} {what} is that long, but the protocol lets "
                            f"{max_length} tokens through")
    room = limit - new_tokens
    fixes = [f"max_length to at most {room} (truncation = \"truncate\" cuts a longer {what[:-1]})"] if room >= 1 else []
    if new_tokens and limit > max_length:
        fixes.append(f"max_new_tokens to at most {limit - max_length}")
    raise UserError(f"{campaign.source}: {keys} the model's {limit} positions ({found['read_from']}): {entries}. Past its "
                    "positions a model fails (a table of positions has no row for them) or, with rotary positions, runs on "
                    "contexts it was never trained for without a word; lower " + " or ".join(fixes or ["max_new_tokens"]))
