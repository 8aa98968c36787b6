"""Commands that price and size before renting: cost, schedule, size, qualify."""

from __future__ import annotations

from pathlib import Path

import click

from iteralab.cli.options import FOLDER, catalog_option, emit, json_option, runs_option
from iteralab.core.errors import UsageError
from iteralab.decision import qualification
from iteralab.money import catalog as prices
from iteralab.money import schedule, sizing


@click.command()
@click.option("--gpu", required=True, help="GPU as the catalog names it, e.g. rtx-4090, rtx-6000-ada, b200")
@click.option("--days", required=True, type=int, help="package length in days: 3, 7 or 30")
@click.option("--lots", required=True, type=click.IntRange(min=1), help="number of lots (a lot may hold several cards)")
@click.option("--accepted-results", type=click.IntRange(min=0), metavar="K",
              help="distinct validated corpora actually accepted; adds cost per validated corpus")
@catalog_option
@json_option
def cost(gpu, days, lots, accepted_results, catalog, as_json):
    """Price a rental package: lot price x lots, never multiplied again by cards per lot."""
    result = prices.quote(prices.load_catalog(catalog), gpu=gpu, days=days, lots=lots, accepted_results=accepted_results)
    emit(as_json, prices.quote_data(result), prices.describe_quote(result))


@click.command("schedule")
@click.option("--start", required=True, help="window start, e.g. '2026-09-28 09:00' (an offset like +07:00 is kept)")
@click.option("--end", required=True, help="window end")
@click.option("--tz", help="IANA time zone of times without an offset, e.g. Europe/Berlin (default UTC)")
@click.option("--gpu", help="also price each package for this GPU")
@click.option("--lots", type=click.IntRange(min=1), default=1, help="lots to price with --gpu (default 1)")
@catalog_option
@json_option
def schedule_command(start, end, tz, gpu, lots, catalog, as_json):
    """Measure a rental window in real elapsed hours and show which packages cover it."""
    window = schedule.plan_window(start=start, end=end, tz=tz, catalog=prices.load_catalog(catalog) if gpu else None,
                                  gpu=gpu, lots=lots)
    emit(as_json, schedule.window_data(window), schedule.describe_window(window))


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


@click.command()
@click.argument("sheets", type=FOLDER, default=Path("qualification"), required=False)
@runs_option("runs folder with the campaigns' evidence (default: runs)")
@catalog_option
@json_option
def qualify(sheets, runs, catalog, as_json):
    """Settle each candidate's six criteria from evidence and sheets; rank the selected ones."""
    settled = qualification.qualify_folder(sheets=sheets, runs=runs, catalog=catalog)
    emit(as_json, qualification.sheets_data(settled), qualification.describe_sheets(settled) or f"no *.toml sheet in {sheets}")



COMMANDS = (cost, schedule_command, size, qualify)
