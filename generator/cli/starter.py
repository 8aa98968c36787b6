"""iteralab init: write a commented starter campaign and check it."""

from __future__ import annotations

import click

from iteralab.cli.options import FOLDER, emit, json_option, runs_option
from iteralab.run import starter
from iteralab.workloads import WORKLOADS


@click.command("init")
@click.argument("out", type=FOLDER)
@click.option("--kind", type=click.Choice(list(WORKLOADS)), default="classify", show_default=True,
              help="the kind of work: classify, generate, adapt or serve")
@click.option("--model", type=FOLDER, metavar="DIR", help="your local model folder: labels (id2label), max_length and "
              "LoRA targets are read from it")
@click.option("--corpus", type=FOLDER, metavar="FILE", help="your corpus (.jsonl or .csv: id, text, label): buckets "
              "and max_length from its token counts")
@click.option("--id-column", metavar="COLUMN", help="the corpus's column (or JSON Lines key) of each entry's id; "
              "guessed from its header and rows when not given")
@click.option("--text-column", metavar="COLUMN", help="the corpus's column of each entry's text; guessed when not given")
@click.option("--label-column", metavar="COLUMN", help="the corpus's column of the gold labels; guessed when not given")
@click.option("--train", type=FOLDER, metavar="FILE", help="with --kind adapt: your training split")
@click.option("--force", is_flag=True, help="replace OUT if it exists")
@runs_option("runs folder the dry run reads, relative to the working folder (default: runs)")
@json_option
def init(out, kind, model, corpus, id_column, text_column, label_column, train, force, runs, as_json):
    """Write a commented starter campaign OUT (e.g. campaigns/tickets.toml), then check it as run --dry-run does.

    Paths written in the campaign are relative to its own folder (~ is your home); runs/ is relative to where you run
    iteralab. No threshold is guessed: the protocol fixes them before any timing, so you write them.
    """
    data = starter.init_campaign(kind=kind, out=out, runs_dir=runs, model=model, corpus=corpus, train=train, force=force,
                                 id_column=id_column, text_column=text_column, label_column=label_column)
    emit(as_json, data, starter.describe_init(data))
    return 0
