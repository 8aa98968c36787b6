"""iteralab size: estimate memory per GPU before renting."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, catalog_option, emit, json_option
from iteralab.core.errors import UsageError
from iteralab.money import catalog as prices
from iteralab.money import sizing


@click.command()
@click.option("--params", help="parameter count, e.g. 7e9 (or read from --model)")
@click.option("--model", type=FOLDER, metavar="DIR",
              help="local model folder: parameters from safetensors headers, attention shape from config.json")
@click.option("--bits", type=click.IntRange(min=1), default=16, help="bits per weight (default 16)")
@click.option("--reserve-gib", default="0", metavar="GIB", help="reserve you choose for activations, workspace, fragmentation (GiB)")
@click.option("--table", is_flag=True, help="show the 32, 16, 8 and 4 bit rows with the same reserve")
@click.option("--kv", is_flag=True, help="add a decoder's KV cache as its own line (an encoder keeps none)")
@click.option("--tokens", type=click.IntRange(min=1), help="tokens per sequence for --kv")
@click.option("--sequences", type=click.IntRange(min=1), help="sequences held at once for --kv")
@click.option("--kv-bits", type=click.IntRange(min=1), default=16, help="bits per cached value (default 16)")
@click.option("--layers", type=click.IntRange(min=1), help="layers, when --model does not give them")
@click.option("--kv-heads", type=click.IntRange(min=1), help="key/value heads, when --model does not give them")
@click.option("--head-dim", type=click.IntRange(min=1), help="head dimension, when --model does not give it")
@click.option("--mode", type=click.Choice(["inference", "training"]), default="inference",
              help="training lists the further items to document, and the adaptation campaign that measures them (README: "
                   "Adaptation campaigns)")
@click.option("--quantization", type=click.Choice(["dynamic-int8"]),
              help="count what the variant converts: Linear weights in int8, every other weight fp32 (needs --model)")
@catalog_option
@json_option
def size(params, model, bits, reserve_gib, table, kv, tokens, sequences, kv_bits, layers, kv_heads, head_dim, mode,
         quantization, catalog, as_json):
    """Estimate memory per GPU: weights, your reserve and KV cache, against the catalog's cards."""
    if (params is None) == (model is None):
        raise UsageError("give either --params or --model")
    kv_cache = {"tokens": tokens, "sequences": sequences, "bits": kv_bits, "layers": layers, "kv_heads": kv_heads,
             "head_dim": head_dim} if kv else None
    result = sizing.estimate(params=params, model=model, bits=bits, reserve_gib=reserve_gib, table=table, kv=kv_cache,
                             training=mode == "training", catalog=prices.load_catalog(catalog), quantization=quantization)
    emit(as_json, result, sizing.describe(result))
